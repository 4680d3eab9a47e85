"""Shared helpers for the operator commands: JSON on stdout, Django errors as CommandError."""

from __future__ import annotations

import json
import smtplib
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import CommandError

from tenants.models import Tenant


def print_json(command, payload: dict[str, Any]) -> None:
    command.stdout.write(json.dumps(payload, indent=2, default=str))


def tenant_or_error(slug: str) -> Tenant:
    tenant = Tenant.objects.select_related("plan").filter(slug=slug).first()
    if tenant is None:
        raise CommandError(f"Unknown tenant {slug!r}.")
    return tenant


def run_service(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except ValidationError as exc:
        messages = (
            [f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items()]
            if hasattr(exc, "error_dict")
            else exc.messages
        )
        raise CommandError("; ".join(messages)) from None


def print_link(
    command, body: dict[str, Any], *, send: bool, mail: Callable[[], None], to: str
) -> None:
    """Print `body` (a one-time login link among it) as JSON, after mailing the link when `send`
    (`body["sent"]`). A mail server that is down still gets the JSON printed — the link is good,
    to be given another way — then an error naming the problem."""
    if send:
        try:
            mail()
        except (OSError, smtplib.SMTPException) as exc:
            print_json(command, body)
            raise CommandError(
                f"The link was not mailed to {to}: {type(exc).__name__}: {exc}"
            ) from None
        body["sent"] = True
    print_json(command, body)

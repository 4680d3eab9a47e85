"""Shared helpers for the operator commands: JSON on stdout, Django errors as CommandError."""

from __future__ import annotations

import json
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

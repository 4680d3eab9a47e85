"""A member's login token: the one API token per person and tenant that `POST /auth/token` (and
the API signup) hands out.

Logging in again hands out the same token, so scripts that log in at every start neither pile up
tokens nobody sees nor log each other out; `rotate=True` replaces it (the old one stops working
at once). Only digests identify tokens (`accounts.selectors.api_token_lookup`); the login token is kept
sealed as well (`common.security.sealed`, under a key outside the database) because handing it out again
needs its value. Named tokens (`accounts.services.api_token_create`) are separate and never reused.
"""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from common.security import secrets
from common.security.sealed import SealError, reseal, seal, unseal
from tenants import audit
from tenants.models import ApiToken, Membership, Tenant
from tenants.suspension import require_active

LOGIN_TOKEN_NAME = "login"


@transaction.atomic
def login_token(*, user: AbstractBaseUser, tenant: Tenant, rotate: bool = False) -> str:
    """The member's login token for `tenant`: the live one, else (or with `rotate`) a new one
    that replaces it."""
    # Two logins at once agree on one token: the membership row serialises them.
    Membership.objects.select_for_update().filter(user=user, tenant=tenant).first()
    current = ApiToken.objects.filter(user=user, tenant=tenant).exclude(sealed="").first()
    if current is not None and not rotate:
        try:
            return unseal(current.sealed)
        except SealError:
            pass  # sealed under a key since dropped: a new token replaces it
    require_active(tenant)
    raw = secrets.generate_api_token()
    # The one logging in, though the request has no one logged in yet.
    with audit.acting_as(user.email or user.get_username()):
        if current is not None:
            current.delete()
        ApiToken.objects.create(
            user=user,
            tenant=tenant,
            name=LOGIN_TOKEN_NAME,
            digest=secrets.api_token_digest(raw),
            prefix=raw[:12],
            sealed=seal(raw),
        )
    return raw


@transaction.atomic
def login_tokens_reseal() -> dict[str, int]:
    """Every login token sealed under the current `SEALING_KEY` (a rotation's last step, with
    `reseal_secrets`). One no key opens still works by its digest; the member's next login
    replaces it."""
    counts = {"login_tokens": 0, "resealed": 0, "current": 0, "login_tokens_unopened": 0}
    for token in ApiToken.objects.select_for_update().exclude(sealed=""):
        counts["login_tokens"] += 1
        try:
            again = reseal(token.sealed)
        except SealError:
            counts["login_tokens_unopened"] += 1
            continue
        if again == token.sealed:
            counts["current"] += 1
        else:
            ApiToken.objects.filter(id=token.id).update(sealed=again)
            counts["resealed"] += 1
    return counts

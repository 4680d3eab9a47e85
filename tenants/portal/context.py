"""Template context every portal page gets (`TEMPLATES` context processors in settings)."""

from __future__ import annotations

from django.http import HttpRequest

from tenants.accounts import trust as accounts


def account(request: HttpRequest) -> dict:
    """`email_unverified`: the banner asking to confirm the account's address (base.html)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"email_unverified": not accounts.is_verified(user)}

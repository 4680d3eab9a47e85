"""Writes of people's access to tenants: sign-up (a person, a tenant, its owner), memberships,
API tokens."""

from __future__ import annotations

import re

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from common.security import secrets
from tenants import audit
from tenants.accounts.login_tokens import login_token
from tenants.accounts.trust import login_address_remember
from tenants.models import (
    ApiToken,
    Membership,
    Tenant,
)
from tenants.suspension import require_active
from tenants.tenant.services import tenant_create


@transaction.atomic
def signup(
    *, tenant: str, email: str, password: str, api_token: bool = True, address: str = ""
) -> tuple[Tenant, AbstractBaseUser, str | None]:
    """A new tenant owned by a new user; returns them and, with `api_token` (the API's signup,
    whose caller goes on with it), the user's login token (`tenants.accounts.login_tokens`). The portal's
    signup asks for none: a token nobody is shown is only something to leak. `address`, where
    the signup came from, is the account's first usual address: an account used only through
    its signup token is not locked out by strangers' wrong passwords (`tenants.accounts.trust`)."""
    email = (email or "").strip().lower()
    User = get_user_model()
    if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", email):
        raise ValidationError({"email": ["Enter a valid email address."]})
    if User.objects.filter(username=email).exists():
        raise ValidationError({"email": ["An account with this email already exists."]})
    user = User(username=email, email=email)
    try:
        validate_password(password, user)
    except ValidationError as exc:
        raise ValidationError({"password": exc.messages}) from None
    with audit.acting_as(email):  # not logged in yet, but the one doing it
        new_tenant = tenant_create(tenant)
        user.set_password(password)
        user.save()
        Membership.objects.create(user=user, tenant=new_tenant, role=Membership.Role.OWNER)
        token = login_token(user=user, tenant=new_tenant) if api_token else None
    login_address_remember(user, address)
    return new_tenant, user, token


def membership_add(*, tenant: Tenant, user: AbstractBaseUser, role: str) -> Membership:
    if role not in Membership.Role.values:
        raise ValidationError({"role": [f"Role must be one of {Membership.Role.values}."]})
    membership, _ = Membership.objects.update_or_create(
        user=user, tenant=tenant, defaults={"role": role}
    )
    return membership


def api_token_create(*, user: AbstractBaseUser, tenant: Tenant, name: str = "default"):
    require_active(tenant)
    raw = secrets.generate_api_token()
    token = ApiToken.objects.create(
        user=user,
        tenant=tenant,
        name=name[:64] or "default",
        digest=secrets.api_token_digest(raw),
        prefix=raw[:12],
    )
    return token, raw


def api_token_touch(token: ApiToken) -> None:
    """Note the token's use (`last_used_at`), at most once a minute: a bookkeeping write, not
    audited, never a save of the whole row."""
    if token.last_used_at is None or (timezone.now() - token.last_used_at).total_seconds() > 60:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())


def api_token_delete(token: ApiToken) -> None:
    token.delete()

"""Reads of people's access: memberships and API tokens."""

from __future__ import annotations

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from common import secrets
from tenants.models import (
    ApiToken,
    Membership,
    Tenant,
)


def memberships_for_user(user: AbstractBaseUser) -> QuerySet[Membership]:
    return Membership.objects.filter(user=user).select_related("tenant", "tenant__plan")


def current_membership(user: AbstractBaseUser, chosen: str | None) -> Membership | None:
    """The membership the portal shows: the tenant chosen in the session, else the first."""
    memberships = memberships_for_user(user).order_by("created_at")
    membership = memberships.filter(tenant__slug=chosen).first() if chosen else None
    return membership or memberships.first()


def membership_get(user: AbstractBaseUser, tenant: Tenant) -> Membership | None:
    return Membership.objects.filter(user=user, tenant=tenant).first()


def api_token_lookup(raw_token: str) -> ApiToken | None:
    return (
        ApiToken.objects.select_related("user", "tenant")
        .filter(digest=secrets.api_token_digest(raw_token))
        .first()
    )


def api_tokens_list(*, tenant: Tenant, user: AbstractBaseUser) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(tenant=tenant, user=user).order_by("-created_at")

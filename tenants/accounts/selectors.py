"""Reads of people's access: memberships and API tokens."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import QuerySet

from common.security import secrets
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


def membership_first(user: AbstractBaseUser, tenant_slug: str | None = None) -> Membership | None:
    """The user's first membership (oldest), within the tenant `tenant_slug` when given."""
    memberships = memberships_for_user(user)
    if tenant_slug:
        memberships = memberships.filter(tenant__slug=tenant_slug)
    return memberships.order_by("created_at").first()


def is_member(user: AbstractBaseUser, tenant_slug: str | None = None) -> bool:
    """Whether the user belongs to a tenant (to `tenant_slug`, when given: "" is no tenant)."""
    memberships = memberships_for_user(user)
    if tenant_slug is not None:
        memberships = memberships.filter(tenant__slug=tenant_slug)
    return memberships.exists()


def user_get(pk: object) -> AbstractBaseUser | None:
    """The user with primary key `pk` (None: none, or no key)."""
    return get_user_model().objects.filter(pk=pk).first()


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


def api_token_get(*, tenant: Tenant, user: AbstractBaseUser, token_id: int) -> ApiToken | None:
    """One of the user's tokens for `tenant` (None for anyone else's)."""
    return api_tokens_list(tenant=tenant, user=user).filter(id=token_id).first()

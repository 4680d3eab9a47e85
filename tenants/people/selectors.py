"""Reads of a tenant's people: its members, its open invitations, an invitation by its link."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import QuerySet
from django.utils import timezone

from tenants.models import Invitation, Membership, Tenant
from tenants.people.services import invitation_digest


def members_list(*, tenant: Tenant) -> QuerySet[Membership]:
    """The tenant's members, oldest first."""
    return Membership.objects.filter(tenant=tenant).select_related("user").order_by("created_at")


def member_get(*, tenant: Tenant, member_id: int) -> Membership | None:
    """One of the tenant's members (None for another tenant's)."""
    return Membership.objects.filter(tenant=tenant, id=member_id).first()


def invitations_open(*, tenant: Tenant) -> QuerySet[Invitation]:
    """The tenant's invitations not yet accepted nor expired."""
    return Invitation.objects.filter(tenant=tenant, accepted_at=None, expires_at__gt=timezone.now())


def invitation_get(*, tenant: Tenant, invitation_id: int) -> Invitation | None:
    """One of the tenant's invitations (None for another tenant's)."""
    return Invitation.objects.filter(tenant=tenant, id=invitation_id).first()


def invitation_by_token(token: str) -> Invitation | None:
    """The invitation a link's token opens, whatever its state (None: no such link)."""
    return (
        Invitation.objects.select_related("tenant").filter(digest=invitation_digest(token)).first()
    )


def account_exists(email: str) -> bool:
    """Whether someone already has an account under `email` (any case)."""
    return get_user_model().objects.filter(email__iexact=email).exists()

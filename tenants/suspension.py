"""A suspended tenant keeps what it has but gets nothing new: the one check every writer that
creates something for a tenant (devices, tokens, certificates, provisioning) makes first."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied

from tenants.models import Tenant


def require_active(tenant: Tenant) -> None:
    """Raise `PermissionDenied` (a 403 naming the tenant) unless the tenant is active."""
    if tenant.status != Tenant.Status.ACTIVE:
        raise PermissionDenied(f"Tenant {tenant.slug} is suspended: nothing new can be created.")

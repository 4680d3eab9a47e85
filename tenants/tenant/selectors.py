"""Reads of a tenant itself: by slug, and its effective quota (plan limits with overrides)."""

from __future__ import annotations

from tenants.models import (
    QUOTA_KEYS,
    Tenant,
)


def effective_quota(tenant: Tenant) -> dict[str, int]:
    """The plan's limits with the tenant's overrides applied: what the broker enforces."""
    limits = tenant.plan.limits()
    for key, value in (tenant.quota_overrides or {}).items():
        if key in QUOTA_KEYS:
            limits[key] = int(value)
    return limits


def tenant_find(slug: str) -> Tenant | None:
    """The tenant `slug` names, or None."""
    return Tenant.objects.select_related("plan").filter(slug=slug).first()


def tenant_get(slug: str) -> Tenant:
    tenant = Tenant.objects.select_related("plan").filter(slug=slug).first()
    if tenant is None:
        raise Tenant.DoesNotExist(f"No tenant {slug!r}.")
    return tenant

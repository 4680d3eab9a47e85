"""Writes of a tenant itself: its plan (and the default plans), status, settings and quota
overrides. Each is one transaction; broker-relevant ones announce the change."""

from __future__ import annotations

from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from common.contracts.notifications import ChangeKind
from tenants.models import (
    QUOTA_KEYS,
    RESERVED_SLUGS,
    Plan,
    Tenant,
)
from tenants.notify import announce

DEFAULT_PLAN = "free"


DEFAULT_PLANS = {
    "free": {"name": "Free", "monthly_price_cents": 0},
    "pro": {
        "name": "Pro",
        "monthly_price_cents": 4900,
        "price_per_million_messages_cents": 100,
        "max_connections": 10_000,
        "max_publish_rate": 5_000,
        "max_inbound_bytes_rate": 50_000_000,
        "max_outbound_bytes_rate": 100_000_000,
        "max_message_size": 1_048_576,
        "max_subscriptions_per_client": 1000,
        "max_queued_messages": 10_000,
        "max_retained_messages": 100_000,
        "max_session_expiry": 7 * 86_400,
        "max_rule_outputs": 1000,
        "journey_retention_hours": 7 * 24,
        # A paid plan keeps a week of every topic until the tenant sets policies of its own.
        "history_default_days": 7,
        "max_history_days": 90,
        "max_history_policies": 100,
        "max_shadows": 100_000,
        "max_shadow_versions": 1_000,
        "max_certificates": 100_000,
        "max_ca_certificates": 50,
        "max_alarms": 500,
        "max_alarm_keys": 100_000,
        "max_sink_outbox_messages": 1_000_000,
        "max_sink_outbox_bytes": 1_073_741_824,
    },
}


def plan_get_or_create(slug: str = DEFAULT_PLAN) -> Plan:
    if slug not in DEFAULT_PLANS and not Plan.objects.filter(slug=slug).exists():
        raise ValidationError({"plan": f"Unknown plan {slug!r}."})
    plan, _ = Plan.objects.get_or_create(slug=slug, defaults=DEFAULT_PLANS.get(slug, {}))
    return plan


def validate_slug(slug: str) -> None:
    tenant = Tenant(slug=slug)
    try:
        tenant.clean_fields(exclude=["name", "status", "plan", "quota_overrides", "created_at"])
    except ValidationError as exc:
        raise ValidationError({"tenant": exc.message_dict.get("slug", ["Invalid slug."])}) from None
    if slug in RESERVED_SLUGS:
        raise ValidationError({"tenant": [f"{slug!r} is reserved; choose another name."]})


@transaction.atomic
def tenant_change_plan(tenant: Tenant, plan: str, *, at: datetime | None = None) -> Tenant:
    """Move a tenant to another plan from `at` (now by default), keeping the history billing
    prorates the base fee with; the broker hears of the new limits (at once: a change is
    recorded when it takes effect, so `at` is never in the future).

    `at` may lie in the past (an operator recording an upgrade from the 1st), but not before the
    tenant's latest plan change (the history stays in order) nor inside a period already
    invoiced (issued invoices are never rewritten)."""
    from tenants.models import Invoice, TenantPlanChange

    new = plan_get_or_create(plan)
    if new.id == tenant.plan_id:
        return tenant
    now = timezone.now()
    at = (at or now).astimezone(UTC)
    if at > now:
        raise ValidationError(
            {"from": [f"{at:%Y-%m-%d %H:%M} UTC is in the future: change the plan on that day."]}
        )
    latest = (
        TenantPlanChange.objects.select_for_update()
        .filter(tenant=tenant)
        .order_by("-effective_at", "-id")
        .first()
    )
    if latest is not None and at < latest.effective_at:
        raise ValidationError(
            {
                "from": [
                    f"{tenant.slug} changed plan on {latest.effective_at:%Y-%m-%d %H:%M} UTC: "
                    "a new change cannot take effect before it."
                ]
            }
        )
    invoiced = (
        Invoice.objects.filter(
            tenant=tenant, status__in=[Invoice.Status.ISSUED, Invoice.Status.PAID]
        )
        .order_by("-period")
        .values_list("period", flat=True)
        .first()
    )
    if invoiced is not None and f"{at:%Y-%m}" <= invoiced:
        raise ValidationError(
            {
                "from": [
                    f"{invoiced} is already invoiced for {tenant.slug}: a plan change can take "
                    "effect from the month after."
                ]
            }
        )
    TenantPlanChange.objects.create(
        tenant=tenant, from_plan_id=tenant.plan_id, to_plan=new, effective_at=at
    )
    tenant.plan = new
    tenant.save(update_fields=["plan"])
    transaction.on_commit(lambda: announce(tenant.slug, "tenant.quota"))
    return tenant


def tenant_create(slug: str, *, plan: str = DEFAULT_PLAN, name: str = "") -> Tenant:
    validate_slug(slug)
    if Tenant.objects.filter(slug=slug).exists():
        raise ValidationError({"tenant": [f"Tenant {slug!r} already exists."]})
    return Tenant.objects.create(slug=slug, name=name or slug, plan=plan_get_or_create(plan))


@transaction.atomic
def tenant_set_status(tenant: Tenant, status: str) -> Tenant:
    if status not in Tenant.Status.values:
        raise ValidationError({"status": [f"Status must be one of {Tenant.Status.values}."]})
    tenant.status = status
    tenant.save(update_fields=["status"])
    announce(tenant.slug, ChangeKind.TENANT_STATUS)
    return tenant


TENANT_SETTINGS = ("name", "acl_default", "archive_enabled", "queue_qos0_offline")


@transaction.atomic
def tenant_update_settings(tenant: Tenant, **settings: object) -> Tenant:
    """Change the tenant's own settings (see TENANT_SETTINGS); brokers reload them live."""
    unknown = sorted(set(settings) - set(TENANT_SETTINGS))
    if unknown:
        raise ValidationError({key: ["Not a tenant setting."] for key in unknown})
    for key, value in settings.items():
        setattr(tenant, key, value)
    tenant.full_clean(exclude=["plan"])
    tenant.save(update_fields=list(settings))
    announce(tenant.slug, ChangeKind.TENANT_SETTINGS)
    return tenant


@transaction.atomic
def tenant_set_quota(tenant: Tenant, overrides: dict[str, object]) -> Tenant:
    """Override plan limits: keys from QUOTA_KEYS, non-negative integers; None removes one."""
    merged = dict(tenant.quota_overrides or {})
    for key, value in overrides.items():
        if key not in QUOTA_KEYS:
            raise ValidationError(
                {key: [f"Unknown quota key; valid keys: {', '.join(QUOTA_KEYS)}."]}
            )
        if value is None:
            merged.pop(key, None)
            continue
        number = _whole_number(value)
        if number is None:
            raise ValidationError({key: [f"Must be a non-negative whole number, got {value!r}."]})
        merged[key] = number
    tenant.quota_overrides = merged
    tenant.save(update_fields=["quota_overrides"])
    announce(tenant.slug, ChangeKind.TENANT_QUOTA)
    return tenant


def _whole_number(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None

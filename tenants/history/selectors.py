"""Reads of a tenant's history: its policies, what the archive keeps of it and why, how long, and
what it stores (`common.archive.history_policy` for the rules; scoped to one tenant, as every selector)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import QuerySet, Sum
from django.http import Http404

from common.archive.history_policy import DEFAULT_FILTER, retention_days
from common.charges.pricing import BYTES_PER_GB
from common.stores.object_store import ObjectStore, open_object_store
from tenants.history.retention import history_hours
from tenants.models import HistoryPolicy, Rule, Tenant, Usage
from tenants.tenant.selectors import effective_quota

log = logging.getLogger(__name__)

HOURS_PER_MONTH = 730  # a GB-month in GB-hours (365 × 24 / 12)


def history_policies_list(*, tenant: Tenant) -> QuerySet[HistoryPolicy]:
    return HistoryPolicy.objects.filter(tenant=tenant)


def history_policy_get(*, tenant: Tenant, policy_id: int) -> HistoryPolicy:
    policy = HistoryPolicy.objects.filter(tenant=tenant, id=policy_id).first()
    if policy is None:
        raise Http404(f"No history policy {policy_id}.")
    return policy


@dataclass(frozen=True)
class RuleFeed:
    rule: str
    sources: tuple[str, ...]


def rule_feeds(*, tenant: Tenant) -> list[RuleFeed]:
    """The tenant's enabled rules and the sources their FROM reads (archived for them)."""
    from common.rules import RuleSyntaxError, compile_rule

    feeds = []
    for name, sql in Rule.objects.filter(tenant=tenant, enabled=True).values_list("name", "sql"):
        try:
            sources = compile_rule(sql).sources
        except RuleSyntaxError:
            continue
        feeds.append(RuleFeed(name, tuple(sources)))
    return feeds


def tenant_retention_days(tenant: Tenant) -> int:
    """Days of the tenant's history retention keeps (`common.archive.history_policy.retention_days`)."""
    return retention_days(
        policy_days=HistoryPolicy.objects.filter(tenant=tenant).values_list("days", flat=True),
        default_days=tenant.plan.history_default_days,
        max_days=effective_quota(tenant)["max_history_days"],
        archive_enabled=tenant.archive_enabled,
        has_rules=Rule.objects.filter(tenant=tenant, enabled=True).exists(),
    )


def history_summary(
    *, tenant: Tenant, store: ObjectStore | None = None, now: datetime | None = None
) -> dict:
    """What the History page and `GET /api/v1/history` show: the plan's default and limits, what
    is archived and why, how long it is kept, and what it stores (now and this month)."""
    now = now or datetime.now(UTC)
    limits = effective_quota(tenant)
    policies = list(history_policies_list(tenant=tenant))
    default_days = tenant.plan.history_default_days
    default_applies = tenant.archive_enabled and not policies and default_days > 0
    try:
        hours: dict | None = history_hours(store or open_object_store(), tenant.slug)
    except Exception:  # the object store is away: the rest of the page still stands
        log.warning("history of %s not listed: object store unavailable", tenant.slug, exc_info=1)
        hours = None
    month_start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    usage = Usage.objects.filter(tenant=tenant, minute__gte=month_start, minute__lt=now)
    byte_hours = usage.aggregate(total=Sum("storage_byte_hours"))["total"] or 0
    sample = usage.filter(storage_byte_hours__gt=0).order_by("-minute").first()
    gb_hours = byte_hours / BYTES_PER_GB
    return {
        "plan": tenant.plan.name,
        "default_days": default_days,
        "default_applies": default_applies,
        "default_filter": DEFAULT_FILTER,
        "max_days": limits["max_history_days"],
        "max_policies": limits["max_history_policies"],
        "policies": len(policies),
        "archive_enabled": tenant.archive_enabled,
        "rules": [{"rule": f.rule, "sources": list(f.sources)} for f in rule_feeds(tenant=tenant)],
        "retention_days": tenant_retention_days(tenant),
        # None: the object store did not answer.
        "history_bytes": sum(size for _, size in hours.values()) if hours is not None else None,
        "history_hours": len(hours) if hours is not None else None,
        "oldest_hour": min(hours).isoformat() if hours else None,
        "stored_bytes": sample.stored_bytes if sample is not None else 0,
        "stored_sampled_at": sample.minute.isoformat() if sample is not None else None,
        "storage_gb_hours": round(gb_hours, 6),
        "storage_gb_months": round(gb_hours / HOURS_PER_MONTH, 6),
    }

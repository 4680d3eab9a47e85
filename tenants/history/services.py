"""Writes of history policies: a tenant's topic filters kept for some days in the archive
(`common.archive.history_policy` says what the broker then archives). Each write announces
`history.changed`, so every broker reads the tenant's needs again when it commits."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from common.archive.history_policy import policy_filter_problem
from common.contracts.notifications import ChangeKind
from tenants.models import HistoryPolicy, Tenant
from tenants.notify import announce
from tenants.tenant.selectors import effective_quota


def _whole_days(days: object) -> int:
    if isinstance(days, bool) or not isinstance(days, int):
        if isinstance(days, str) and days.strip().isdigit():
            return int(days.strip())
        raise ValidationError({"days": [f"Give a whole number of days, got {days!r}."]})
    return days


@transaction.atomic
def history_policy_create(*, tenant: Tenant, topic_filter: str, days: object) -> HistoryPolicy:
    """Keep `topic_filter`'s messages `days` days; within the plan's `max_history_days` and
    `max_history_policies` (overrides applied)."""
    problem = policy_filter_problem(topic_filter)
    if problem:
        raise ValidationError({"topic_filter": [problem]})
    days = _whole_days(days)
    # One tenant's writes in turn: the count below cannot be raced past the limit.
    Tenant.objects.select_for_update().filter(id=tenant.id).first()
    limits = effective_quota(tenant)
    most_days = limits["max_history_days"]
    if days < 1:
        raise ValidationError({"days": ["Keep at least 1 day (delete the policy to keep none)."]})
    if days > most_days:
        plan = tenant.plan.name
        raise ValidationError(
            {
                "days": [
                    f"Your plan ({plan}) keeps history at most {most_days} day"
                    f"{'s' if most_days != 1 else ''} (max_history_days); asked for {days}."
                ]
            }
        )
    policies = HistoryPolicy.objects.filter(tenant=tenant)
    existing = policies.filter(topic_filter=topic_filter).first()
    if existing is not None:
        raise ValidationError(
            {
                "topic_filter": [
                    f"There is a policy for {topic_filter!r} already (id {existing.id}, "
                    f"{existing.days} days): delete it first to change its days."
                ]
            }
        )
    most = limits["max_history_policies"]
    if policies.count() >= most:
        raise ValidationError(
            {
                "topic_filter": [
                    f"Your plan ({tenant.plan.name}) allows {most} history "
                    f"polic{'ies' if most != 1 else 'y'} (max_history_policies): delete one "
                    "first, or use a wider filter."
                ]
            }
        )
    policy = HistoryPolicy.objects.create(tenant=tenant, topic_filter=topic_filter, days=days)
    announce(tenant.slug, ChangeKind.HISTORY_CHANGED, ids=[policy.id])
    return policy


@transaction.atomic
def history_policy_delete(policy: HistoryPolicy) -> None:
    """Stop keeping the policy's topics (what is kept already goes with the next retention)."""
    slug, policy_id = policy.tenant.slug, policy.id
    policy.delete()
    announce(slug, ChangeKind.HISTORY_CHANGED, ids=[policy_id])

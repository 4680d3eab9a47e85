"""Reads of a tenant's durable shared groups (issue 45): each `$share/{group}/{filter}` group the
broker keeps (`SharedGroupQueue`, written by data_plane.storage.group_records) with what it holds:
its messages are queue rows (`MqttQueuedMessage`) under the group's holder id. Bound to the
tenant's id, so another tenant's group is never among them.
"""

from __future__ import annotations

from django.db.models import Count, IntegerField, Min, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from tenants.models import MqttQueuedMessage, SharedGroupQueue, Tenant

MAX_NAME_CHARS = 256  # the longest group name a row holds


def _live(now) -> Q:
    return Q(expires_at__isnull=True) | Q(expires_at__gt=now)


def shared_groups_list(*, tenant: Tenant) -> QuerySet[SharedGroupQueue]:
    """The tenant's groups not past their end, by name and filter, each annotated with `depth`
    (messages it holds, those past their expiry not counted) and `oldest_at` (when the oldest
    of them was queued; None when it holds none): one query, the queue read by subqueries."""
    now = timezone.now()
    held = (
        MqttQueuedMessage.objects.filter(
            tenant_id=OuterRef("tenant_id"), client_id=OuterRef("holder_id")
        )
        .filter(_live(now))
        .order_by()
        .values("client_id")  # one group per holder: the aggregate over its rows
    )
    return (
        SharedGroupQueue.objects.filter(tenant=tenant)
        .filter(_live(now))
        .annotate(
            depth=Coalesce(
                Subquery(held.annotate(n=Count("id")).values("n")[:1]),
                0,
                output_field=IntegerField(),
            ),
            oldest_at=Subquery(held.annotate(first=Min("created_at")).values("first")[:1]),
        )
        .order_by("name", "topic_filter", "id")
    )


def shared_groups_count(*, tenant: Tenant) -> int:
    """The tenant's groups not past their end: what counts against `max_shared_groups`."""
    return SharedGroupQueue.objects.filter(tenant=tenant).filter(_live(timezone.now())).count()


def shared_group_holders(*, tenant: Tenant, name: str, topic_filter: str) -> list[str]:
    """The holder ids of the tenant's group `name` on `topic_filter` (one, or none when the
    tenant has no such group); for a write, locks the rows (call inside a transaction)."""
    if not name or len(name) > MAX_NAME_CHARS or "\x00" in name or "\x00" in topic_filter:
        return []  # no group can be called that: not a database error
    rows = SharedGroupQueue.objects.select_for_update().filter(
        tenant=tenant, name=name, topic_filter=topic_filter
    )
    return list(rows.values_list("holder_id", flat=True))

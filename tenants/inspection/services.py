"""Writes on what the broker holds for a tenant (issue 30, point 4): deleting retained messages.

The rows go in the request's transaction, which also announces the topic filter
(`retained.deleted`, common.contracts.notifications); every broker node forgets the matching messages it
holds when the transaction commits (data_plane/tenancy/retained_forget.py), so a new subscriber
no longer receives them. Each deletion is audited (who, which filter, how many).
"""

from __future__ import annotations

from django.db import transaction

from common.contracts.notifications import ChangeKind
from tenants import audit
from tenants.inspection.selectors import retained_matching
from tenants.models import RetainedMessage, Tenant
from tenants.notify import announce


def retained_delete(*, tenant: Tenant, topic_filter: str) -> int:
    """Delete the tenant's retained messages whose topic `topic_filter` (checked by the caller:
    `inspection_selectors.topic_filter_checked`) matches; returns how many rows went. The
    brokers are told even when none did: one may hold a message whose row it has not written
    yet."""
    with transaction.atomic():
        ids = [row_id for row_id, _ in retained_matching(tenant=tenant, topic_filter=topic_filter)]
        deleted = 0
        for start in range(0, len(ids), 1000):
            deleted += RetainedMessage.objects.filter(
                tenant=tenant, id__in=ids[start : start + 1000]
            ).delete()[0]
        announce(tenant.slug, ChangeKind.RETAINED_DELETED, topic_filter=topic_filter)
        audit.record(
            tenant_id=tenant.id,
            tenant_slug=tenant.slug,
            action="retained.deleted",
            target=topic_filter,
            detail={"deleted": deleted},
        )
    return deleted

"""Writes on a tenant's durable shared groups (issue 45): deleting one with the messages it holds.

The rows go in the request's transaction, which also announces the group (`shared_group.deleted`
with `group` and `filter`, common.contracts.notifications); the broker node holding it drops what
it holds of it when the transaction commits (data_plane.broker.groups). Audited: who, which
group, how many messages went.
"""

from __future__ import annotations

from django.db import transaction

from common.contracts.notifications import ChangeKind
from tenants import audit
from tenants.models import MqttQueuedMessage, SharedGroupQueue, Tenant
from tenants.notify import announce
from tenants.shared_groups.selectors import shared_group_holders


def shared_group_delete(*, tenant: Tenant, name: str, topic_filter: str) -> bool:
    """Delete the tenant's shared group `name` on `topic_filter` (`$share/{name}/{topic_filter}`)
    and the messages it holds; returns whether the tenant had that group (nothing is done, and
    nothing announced, when it had not)."""
    with transaction.atomic():
        holders = shared_group_holders(tenant=tenant, name=name, topic_filter=topic_filter)
        if not holders:
            return False
        held = MqttQueuedMessage.objects.filter(tenant=tenant, client_id__in=holders)
        messages = held.delete()[0]
        SharedGroupQueue.objects.filter(tenant=tenant, holder_id__in=holders).delete()
        announce(
            tenant.slug, ChangeKind.SHARED_GROUP_DELETED, group=name, topic_filter=topic_filter
        )
        audit.record(
            tenant_id=tenant.id,
            tenant_slug=tenant.slug,
            action="shared_group.deleted",
            target=f"$share/{name}/{topic_filter}",
            detail={"messages": messages},
        )
    return True

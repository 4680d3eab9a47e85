"""Keeping the journey (a service): compact closed hours into per-tenant files and delete what
each tenant's plan no longer keeps (`Plan.journey_retention_hours`), by whole hour folders.

Run by Celery beat (`tenants.tasks.journey_upkeep`, every 5 minutes) and by
`manage.py journey_upkeep`; safe to run again or side by side (compaction follows the marker
protocol of `common.journey.files`; deleting an hour twice deletes nothing the second time).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from common.journey.files import compact_due, delete_before, delete_live_before, journey_tenants
from common.stores.object_store import open_object_store
from tenants.models import Plan, Tenant


def upkeep(store: Any = None, now: datetime | None = None) -> dict[str, Any]:
    store = store if store is not None else open_object_store()
    now = now or datetime.now(UTC)
    compacted = compact_due(store, now)
    kept = {
        slug: hours
        for slug, hours in Tenant.objects.values_list("slug", "plan__journey_retention_hours")
    }
    default = Plan._meta.get_field("journey_retention_hours").default
    deleted = {}
    for slug in sorted(journey_tenants(store)):
        # A tenant gone from the database keeps nothing (its rows outlive it by `default`).
        hours = kept.get(slug, default)
        count = delete_before(store, slug, now - timedelta(hours=hours))
        if count:
            deleted[slug] = count
    longest = max([*kept.values(), default])
    # Live folders hold only markers (and segments nobody compacted) once their hour is gone
    # from every tenant's retention.
    stale = delete_live_before(store, now - timedelta(hours=longest + 1))
    return {"segments_compacted": compacted, "deleted": deleted, "live_deleted": stale}

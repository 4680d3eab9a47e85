"""Retention of the archive's history: per tenant, whole hours older than what it keeps.

A tenant keeps `common.archive.history_policy.retention_days` days: its longest history policy (capped at
its plan's `max_history_days`), its plan's default while it has none, a day while it has enabled
rules, or nothing. Its history is `archive/tenant={slug}/date=…/hour=…/` (compacted parts, and
version 1 segments); an hour whose end is more than that many days ago is deleted whole, and the
parts are taken out of the hour's `_COMPACTED` marker (`common.archive.files.forget_parts`).

The live segments (`archive/live/…`) hold every tenant of a broker together and are not touched
here: they are compacted, and deleted, once their hour is an hour old (`compact_archive`), after
which their rows are in the tenants' history and meet this retention.

Deleting changes what the storage sampler measures. It keeps totals of settled days
(`tenants.usage.storage`, an index object), so the bytes deleted from those days are taken out
of the index here. Retention, the sampler and compaction take one Postgres advisory lock
(`tenants.archive_lock`), so none of them rewrites a marker or the index under another.

Run by Celery beat (`tenants.tasks.history_retention`, hourly) and by
`manage.py history_retention [--tenant T] [--dry-run]`. A tenant's history whose tenant no longer
exists is left alone and reported (`unknown`): an operator deletes it knowingly.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from django.db import connection

from common.archive.files import forget_parts, hour_start
from common.archive.history_policy import retention_days
from common.archive.schema import ARCHIVE_PREFIX
from common.stores.object_store import ObjectStore, open_object_store
from tenants.archive_lock import archive_lock

log = logging.getLogger(__name__)

HOUR = timedelta(hours=1)

# Per tenant: its retention inputs, as `retention_days` takes them.
_TENANTS_SQL = """
SELECT t.slug, t.archive_enabled, p.history_default_days,
       COALESCE(CASE WHEN jsonb_typeof(t.quota_overrides -> 'max_history_days') = 'number'
                     THEN (t.quota_overrides ->> 'max_history_days')::numeric::bigint END,
                p.max_history_days),
       COALESCE((SELECT array_agg(h.days) FROM tenants_historypolicy h WHERE h.tenant_id = t.id),
                '{}'),
       EXISTS (SELECT 1 FROM tenants_rule r WHERE r.tenant_id = t.id AND r.enabled)
  FROM tenants_tenant t JOIN tenants_plan p ON p.id = t.plan_id
"""


def _hour_of(key: str) -> tuple[str, datetime] | None:
    """(tenant, hour) of a history key `archive/tenant=T/date=D/hour=H/…`; None otherwise."""
    parts = key.split("/")
    if len(parts) < 5 or not parts[1].startswith("tenant="):
        return None
    day, hour = parts[2].removeprefix("date="), parts[3].removeprefix("hour=")
    if parts[2][:5] != "date=" or parts[3][:5] != "hour=":
        return None
    try:
        return parts[1].removeprefix("tenant="), hour_start(day, int(hour))
    except ValueError:
        return None


def _by_tenant_and_hour(
    sizes: dict[str, int],
) -> dict[str, dict[datetime, tuple[list[str], int]]]:
    grouped: dict[str, dict[datetime, tuple[list[str], int]]] = {}
    for key, size in sorted(sizes.items()):
        where = _hour_of(key)
        if where is None:
            continue
        tenant, hour = where
        keys, total = grouped.setdefault(tenant, {}).get(hour, ([], 0))
        keys.append(key)
        grouped[tenant][hour] = (keys, total + size)
    return grouped


def history_hours(store: ObjectStore, tenant: str) -> dict[datetime, tuple[list[str], int]]:
    """A tenant's history by hour: each hour's keys and their bytes."""
    sizes = store.sizes(f"{ARCHIVE_PREFIX}/tenant={tenant}/")
    return _by_tenant_and_hour(sizes).get(tenant, {})


def tenant_retention(tenant: str | None = None) -> dict[str, int]:
    """Days kept per tenant (one, or all)."""
    sql, params = _TENANTS_SQL, []
    if tenant is not None:
        sql, params = sql + " WHERE t.slug = %s", [tenant]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        rows = cursor.fetchall()
    return {
        slug: retention_days(
            policy_days=policy_days,
            default_days=default_days,
            max_days=max_days,
            archive_enabled=archive_enabled,
            has_rules=has_rules,
        )
        for slug, archive_enabled, default_days, max_days, policy_days, has_rules in rows
    }


def expired(hour: datetime, days: int, now: datetime) -> bool:
    """Is every row of `hour` older than `days` days at `now`?"""
    return hour + HOUR <= now - timedelta(days=days)


def retention_run(
    *,
    now: datetime | None = None,
    store: ObjectStore | None = None,
    tenant: str | None = None,
    dry_run: bool = False,
) -> dict:
    """Delete the history hours each tenant (or one) no longer keeps. Returns what it did:
    per tenant its days, the hours and bytes deleted (or that would be, with `dry_run`)."""
    from tenants.usage.storage import history_index_forget

    now = (now or datetime.now(UTC)).astimezone(UTC)
    store = store or open_object_store()
    prefix = f"{ARCHIVE_PREFIX}/tenant={tenant}/" if tenant else f"{ARCHIVE_PREFIX}/tenant="
    summary: dict = {"now": now.isoformat(), "dry_run": dry_run, "tenants": {}, "unknown": []}
    with archive_lock():
        keep = tenant_retention(tenant)
        listing = store.sizes(prefix)
        history = _by_tenant_and_hour(listing)
        deleted_sizes: dict[str, dict[str, int]] = {}
        for slug, hours in sorted(history.items()):
            if slug not in keep:
                summary["unknown"].append(slug)
                continue
            days = keep[slug]
            old = sorted(hour for hour in hours if expired(hour, days, now))
            freed = sum(hours[hour][1] for hour in old)
            summary["tenants"][slug] = {
                "days": days,
                "hours_kept": len(hours) - len(old),
                "hours_deleted": len(old),
                "bytes_deleted": freed,
            }
            if dry_run or not old:
                continue
            gone = deleted_sizes.setdefault(slug, {})
            for hour in old:
                keys, _ = hours[hour]
                for key in keys:
                    store.delete(key)
                forget_parts(store, hour, keys)
                gone.update({key: listing[key] for key in keys})
            log.info("history retention: %s keeps %d days; deleted %d hours", slug, days, len(old))
        if deleted_sizes:
            history_index_forget(store, deleted_sizes)
    summary["hours_deleted"] = sum(t["hours_deleted"] for t in summary["tenants"].values())
    summary["bytes_deleted"] = sum(t["bytes_deleted"] for t in summary["tenants"].values())
    return summary

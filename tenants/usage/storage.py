"""Storage metering: one control-plane sample an hour of the bytes each tenant keeps.

A tenant's stored bytes are, at the moment of the sample:

- its retained messages (Postgres `tenants_retainedmessage`, not expired),
- the messages queued for its persistent sessions (`tenants_mqttqueuedmessage`, one row per
  session and message, in flight or waiting),

each counted as payload + topic (UTF-8) + its properties as stored (the JSON text; nothing for
none), a payload spilled to the object store by its object's size (once per tenant, however many
queues refer to it); and

- its archive in the object store (`common.archive.files.archive_bytes_by_tenant`: its history
  files in full, its row share of the live segments not yet compacted);
- its device shadows, classic and named (`tenants_shadow`: name, state and metadata as stored,
  the JSON text), `shadows`;
- its shadows' history (`tenants_shadowversion`, kept `shadow_history_days`: each row's state,
  metadata, request, replies, client token and actor as stored), `shadow_history`;
- its certificates (`certificates`): the CAs it registered, its devices' registered
  certificates, and those its fleet CA issued (claims, and every certificate a claim made over
  MQTT, registered to a device or not): PEM + fingerprint + subject.

Every part is measured by Postgres in one aggregate per table (`octet_length` of what is
stored), so a sample costs a scan of those tables once an hour, not a query per tenant.

The history is not listed in full every hour (a listing that grows with every hour of every
tenant's archive, forever): `history_bytes` keeps the totals of *settled* days (older than
`SETTLE_DAYS`) in a small index object and lists only the days after them, per tenant, starting
the listing past the settled days (S3's StartAfter), so an hour's cost is bounded by the number
of tenants and their recent objects, not by the archive's age. See `history_bytes` for why that
is exact and when it lists everything again.

A sample of B bytes stands for the hour it is taken in: B byte-hours (billed as B / 10^9
GB-hours). It is written to the usage log as rows of writer `storage`, at a key fixed by the
hour (`usage/date=…/hour=HH/storage-0000000000.parquet`): a second run in the same hour finds
the segment and writes nothing, so no hour counts twice, and no broker samples anything (they
used to, each its own view, double counting with several workers). The same rows are added
once to `tenants_usage` for the portal's charts (the bill reads only the log).
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from django.db import connection, transaction

from common.archive.files import archive_bytes_by_tenant
from common.archive.schema import ARCHIVE_PREFIX, USAGE_SCHEMA, usage_segment_key
from common.stores.object_store import ObjectNotFound, ObjectStore, open_object_store
from tenants.models import Tenant, UsageLogImport

STORAGE_WRITER = "storage"
PAYLOAD_PREFIX = "payloads/"  # spilled payloads (data_plane.storage.session_store)

# payload + topic + properties as stored, per tenant; spilled payloads' keys for their sizes.
_MESSAGE_BYTES = """
SELECT t.slug,
       COALESCE(SUM(COALESCE(octet_length(m.payload), 0) + octet_length(m.topic)
                    + CASE WHEN m.properties = '{{}}'::jsonb THEN 0
                           ELSE octet_length(m.properties::text) END), 0),
       COALESCE(array_agg(DISTINCT m.object_key) FILTER (WHERE m.object_key <> ''), '{{}}')
  FROM {table} m JOIN tenants_tenant t ON t.id = m.tenant_id
 WHERE {live}
 GROUP BY t.slug
"""
_RETAINED = _MESSAGE_BYTES.format(
    table="tenants_retainedmessage", live="m.expires_at IS NULL OR m.expires_at > %s"
)
_QUEUED = _MESSAGE_BYTES.format(table="tenants_mqttqueuedmessage", live="%s IS NOT NULL")

# The other rows a tenant keeps: bytes as stored (JSON columns by their text), per tenant.
_ROW_BYTES = """
SELECT t.slug, COALESCE(SUM({size}), 0)
  FROM {table} x JOIN tenants_tenant t ON t.id = x.tenant_id
 GROUP BY t.slug
"""
_JSON = "COALESCE(octet_length(x.{0}::text), 0)"
ROW_PARTS: dict[str, list[tuple[str, str]]] = {
    "shadows": [
        (
            "tenants_shadow",
            f"octet_length(x.name) + {_JSON.format('state')} + {_JSON.format('metadata')}",
        )
    ],
    "shadow_history": [
        (
            "tenants_shadowversion",
            " + ".join(
                [_JSON.format(c) for c in ("state", "metadata", "request", "replies")]
                + ["octet_length(x.client_token)", "octet_length(x.actor)"]
            ),
        )
    ],
    "certificates": [
        ("tenants_cacertificate", "octet_length(x.pem) + 64 + octet_length(x.subject)"),
        ("tenants_devicecertificate", "octet_length(x.pem) + 64 + octet_length(x.subject)"),
        ("tenants_fleetcertificate", "octet_length(x.pem) + 64 + octet_length(x.ownership_token)"),
    ],
}
PARTS = ("retained", "queued", "archive", *ROW_PARTS)

_CHART_UPSERT = """
INSERT INTO tenants_usage (tenant_id, minute, connection_seconds, messages_in, messages_out,
                           bytes_in, bytes_out, dropped, retained_count, stored_bytes,
                           message_units, connection_minutes, storage_byte_hours,
                           rules_triggered, actions_executed)
SELECT t.id, %s, 0, 0, 0, 0, 0, '{}'::jsonb, 0, %s, 0, 0, %s, 0, 0
  FROM tenants_tenant t WHERE t.slug = %s
ON CONFLICT (tenant_id, minute) DO UPDATE SET
  storage_byte_hours = tenants_usage.storage_byte_hours + EXCLUDED.storage_byte_hours,
  stored_bytes = GREATEST(tenants_usage.stored_bytes, EXCLUDED.stored_bytes)
"""


def storage_segment_key(hour: datetime) -> str:
    """The usage-log key of an hour's storage sample: one per hour, whoever takes it."""
    return usage_segment_key(int(hour.timestamp()) * 1000, STORAGE_WRITER, 0)


# -- the archive history, incrementally ---------------------------------------------------------

HISTORY_INDEX_KEY = "storage-index/history.json"  # outside archive/: never counted itself
SETTLE_DAYS = 2
RESCAN = timedelta(days=7)


def _history_day(key: str) -> str:
    """`YYYY-MM-DD` of a history key `archive/tenant=T/date=YYYY-MM-DD/…` ("" if none)."""
    parts = key.split("/", 3)
    return parts[2].removeprefix("date=") if len(parts) > 3 and parts[2][:5] == "date=" else ""


def history_bytes(
    store: ObjectStore, tenants: Iterable[str], now: datetime, *, full: bool = False
) -> tuple[dict[str, int], str]:
    """Per tenant, the bytes of its archive history now, and how they were found (`full` or
    `incremental`).

    History objects are written by the compaction of a closed hour (`common.archive.files`), a
    few minutes after it closes, under that hour's `date=…/hour=…` folder, and deleted only by
    retention (`tenants.history.retention`), which takes what it deletes out of the index
    (`history_index_forget`). So a day older than SETTLE_DAYS no longer changes by itself: the index (`HISTORY_INDEX_KEY`) keeps
    each tenant's total of the days up to `settled_through`, and each sample lists, per tenant,
    only the keys after that day's folder (`StartAfter=archive/tenant=T/date=D/~`: `~` sorts
    after every `hour=` key of day D). Days that have settled since the last sample move into
    the index. A listing is therefore bounded by the tenants and their last few days of objects,
    not by the archive's age.

    The one way a settled day could still change is a compaction of a very old hour (a broker
    that uploads segments days late, or `compact_archive` run by hand for an old day): the index
    would miss those parts. Hence a full listing, rebuilding the index, when it is RESCAN old
    (once a week instead of every hour), when there is none, or with `full=True`
    (`manage.py sample_storage --full`)."""
    cutoff = (now.astimezone(UTC) - timedelta(days=SETTLE_DAYS)).date().isoformat()
    index = _read_index(store)
    stale = index is None or now - datetime.fromisoformat(index["full_scan_at"]) >= RESCAN
    if full or stale:
        totals: dict[str, int] = {}
        settled: dict[str, int] = {}
        for key, size in store.sizes(f"{ARCHIVE_PREFIX}/tenant=").items():
            tenant = key.split("/", 2)[1].removeprefix("tenant=")
            totals[tenant] = totals.get(tenant, 0) + size
            if _history_day(key) <= cutoff:
                settled[tenant] = settled.get(tenant, 0) + size
        _write_index(store, cutoff, settled, full_scan_at=now)
        return totals, "full"
    previous = index["settled_through"]
    settled = dict(index["tenants"])
    totals = dict(settled)
    for tenant in sorted(set(tenants) | set(settled)):
        prefix = f"{ARCHIVE_PREFIX}/tenant={tenant}/"
        for key, size in store.sizes(prefix, f"{prefix}date={previous}/~").items():
            totals[tenant] = totals.get(tenant, 0) + size
            if _history_day(key) <= cutoff:  # settled since the last sample
                settled[tenant] = settled.get(tenant, 0) + size
    if cutoff > previous:
        full_scan_at = datetime.fromisoformat(index["full_scan_at"])
        _write_index(store, cutoff, settled, full_scan_at=full_scan_at)
    return totals, "incremental"


def history_index_forget(store: ObjectStore, deleted: dict[str, dict[str, int]]) -> None:
    """Retention deleted these history objects (tenant -> key -> size): take those of settled
    days out of the index's totals (later days are listed afresh at each sample). Called under
    the archive lock (`tenants.archive_lock`), as the sampler reads the index."""
    index = _read_index(store)
    if index is None:
        return  # the next sample lists everything
    settled_through = index["settled_through"]
    totals = dict(index["tenants"])
    for tenant, sizes in deleted.items():
        gone = sum(size for key, size in sizes.items() if _history_day(key) <= settled_through)
        if gone and tenant in totals:
            totals[tenant] = max(0, totals[tenant] - gone)
    full_scan_at = datetime.fromisoformat(index["full_scan_at"])
    _write_index(store, settled_through, totals, full_scan_at=full_scan_at)


def _read_index(store: ObjectStore) -> dict[str, Any] | None:
    try:
        index = json.loads(store.get(HISTORY_INDEX_KEY))
    except (ObjectNotFound, ValueError):
        return None
    return index if isinstance(index, dict) and index.get("version") == 1 else None


def _write_index(
    store: ObjectStore, settled_through: str, tenants: dict[str, int], *, full_scan_at: datetime
) -> None:
    body = {
        "version": 1,
        "settled_through": settled_through,
        "full_scan_at": full_scan_at.astimezone(UTC).isoformat(),
        "tenants": dict(sorted(tenants.items())),
    }
    store.put(HISTORY_INDEX_KEY, json.dumps(body).encode())


def stored_bytes_by_tenant(
    store: ObjectStore, now: datetime, *, full: bool = False
) -> dict[str, dict[str, int]]:
    """Per tenant: `retained`, `queued`, `archive`, `shadows`, `shadow_history` and
    `certificates` bytes stored at `now` (`PARTS`)."""
    payload_sizes: dict[str, int] | None = None
    measured: dict[str, dict[str, int]] = {}

    def parts(slug: str) -> dict[str, int]:
        return measured.setdefault(slug, dict.fromkeys(PARTS, 0))

    with connection.cursor() as cursor:
        for kind, sql in (("retained", _RETAINED), ("queued", _QUEUED)):
            cursor.execute(sql, [now])
            for slug, inline, object_keys in cursor.fetchall():
                size = int(inline)
                if object_keys:
                    if payload_sizes is None:
                        payload_sizes = store.sizes(PAYLOAD_PREFIX)
                    size += sum(payload_sizes.get(key, 0) for key in object_keys)
                parts(slug)[kind] = size
        for kind, tables in ROW_PARTS.items():
            for table, size_sql in tables:
                cursor.execute(_ROW_BYTES.format(table=table, size=size_sql))
                for slug, size in cursor.fetchall():
                    parts(slug)[kind] += int(size)
    from tenants.archive_lock import archive_lock

    slugs = Tenant.objects.values_list("slug", flat=True)
    with archive_lock():  # retention may be deleting history and correcting the index
        history, _ = history_bytes(store, slugs, now, full=full)
    for slug, size in archive_bytes_by_tenant(store, history).items():
        parts(slug)["archive"] = size
    return measured


def storage_sample(
    *, now: datetime | None = None, store: ObjectStore | None = None, full: bool = False
) -> dict:
    """Take this hour's storage sample unless it was taken already. Returns what it did."""
    store = store or open_object_store()
    now = now or datetime.now(UTC)
    hour = now.replace(minute=0, second=0, microsecond=0)
    key = storage_segment_key(hour)
    try:
        store.get(key)
        return {"hour": hour.isoformat(), "key": key, "state": "already sampled", "tenants": {}}
    except ObjectNotFound:
        pass
    measured = stored_bytes_by_tenant(store, now, full=full)
    rows = [
        _usage_row(slug, hour, sum(parts.values()))
        for slug, parts in sorted(measured.items())
        if sum(parts.values()) > 0
    ]
    table = pa.Table.from_pylist(rows, schema=USAGE_SCHEMA)
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    store.put(key, sink.getvalue())
    _add_to_charts(key, rows)
    return {"hour": hour.isoformat(), "key": key, "state": "sampled", "tenants": measured}


def _usage_row(tenant: str, hour: datetime, stored: int) -> dict[str, Any]:
    row: dict[str, Any] = {name: 0 for name in USAGE_SCHEMA.names}
    row.update(tenant=tenant, minute=hour, writer=STORAGE_WRITER, storage_byte_hours=stored)
    return row


def _add_to_charts(key: str, rows: list[dict[str, Any]]) -> None:
    """The sample into the portal's usage minutes, once per segment. (A crash between the put
    and here leaves that hour out of the charts only: the bill reads the log.)"""
    with transaction.atomic():
        if UsageLogImport.objects.filter(key=key).exists():
            return
        with connection.cursor() as cursor:
            cursor.executemany(
                _CHART_UPSERT,
                [
                    (r["minute"], r["storage_byte_hours"], r["storage_byte_hours"], r["tenant"])
                    for r in rows
                ],
            )
        UsageLogImport.objects.create(key=key)

"""Storage metering: one control-plane sample an hour of the bytes each tenant keeps.

A tenant's stored bytes are, at the moment of the sample:

- its retained messages (Postgres `tenants_retainedmessage`, not expired),
- the messages queued for its persistent sessions (`tenants_mqttqueuedmessage`, one row per
  session and message, in flight or waiting),

each counted as payload + topic (UTF-8) + its properties as stored (the JSON text; nothing for
none), a payload spilled to the object store by its object's size (once per tenant, however many
queues refer to it); and

- its archive in the object store (`common.archive_io.archive_bytes_by_tenant`: its history
  files in full, its row share of the live segments not yet compacted).

A sample of B bytes stands for the hour it is taken in: B byte-hours (billed as B / 10^9
GB-hours). It is written to the usage log as rows of writer `storage`, at a key fixed by the
hour (`usage/date=…/hour=HH/storage-0000000000.parquet`): a second run in the same hour finds
the segment and writes nothing, so no hour counts twice, and no broker samples anything (they
used to, each its own view, double counting with several workers). The same rows are added
once to `tenants_usage` for the portal's charts (the bill reads only the log).
"""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from django.db import connection, transaction

from common.archive_io import archive_bytes_by_tenant
from common.archive_schema import USAGE_SCHEMA, usage_segment_key
from common.object_store import ObjectNotFound, ObjectStore, open_object_store
from tenants.models import UsageLogImport

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


def stored_bytes_by_tenant(store: ObjectStore, now: datetime) -> dict[str, dict[str, int]]:
    """Per tenant: `retained`, `queued` and `archive` bytes stored at `now`."""
    payload_sizes: dict[str, int] | None = None
    measured: dict[str, dict[str, int]] = {}
    with connection.cursor() as cursor:
        for kind, sql in (("retained", _RETAINED), ("queued", _QUEUED)):
            cursor.execute(sql, [now])
            for slug, inline, object_keys in cursor.fetchall():
                size = int(inline)
                if object_keys:
                    if payload_sizes is None:
                        payload_sizes = store.sizes(PAYLOAD_PREFIX)
                    size += sum(payload_sizes.get(key, 0) for key in object_keys)
                measured.setdefault(slug, {"retained": 0, "queued": 0, "archive": 0})[kind] = size
    for slug, size in archive_bytes_by_tenant(store).items():
        measured.setdefault(slug, {"retained": 0, "queued": 0, "archive": 0})["archive"] = size
    return measured


def storage_sample(*, now: datetime | None = None, store: ObjectStore | None = None) -> dict:
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
    measured = stored_bytes_by_tenant(store, now)
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

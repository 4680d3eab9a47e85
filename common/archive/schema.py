"""The message archive, version 2: one Parquet schema for every writer and reader.

The broker writes it; the Spark rule jobs, the billing job, DuckDB and tests read it. Nothing else
defines these columns: import `ARCHIVE_SCHEMA` and the key helpers from here. For its users it is
written down in docs/archive.md (with what may change and what may not); files written by
earlier versions stay readable (tests/storage/test_archive_format.py).

Rows
----
One row per archived *event*. `event` says which:

| event                  | what the row is                         | columns that carry it          |
|------------------------|-----------------------------------------|--------------------------------|
| `message.publish`      | an application message the broker routed | topic, qos, retain, payload, the publish properties |
| `client.connected`     | a device connected                      | peer, proto_ver, keepalive, clean_start, session_expiry |
| `client.disconnected`  | a device's connection ended             | reason (EMQX's reason names, e.g. `normal`, `keepalive_timeout`, `takenover`, or `0x..`) |
| `session.subscribed`   | a subscription was granted              | topic (the filter), qos        |
| `session.unsubscribed` | a subscription was removed              | topic (the filter)             |
| `shadow.updated`       | a device shadow update was accepted     | topic (`…/update/documents`), payload (that document: previous and current) |
| `shadow.delta`         | …after which desired and reported differ | topic (`…/update/delta`), payload (the delta document) |
| `shadow.deleted`       | a device shadow was deleted             | topic (`…/delete/accepted`), payload (its version) |

For the shadow events `client_id` and `username` are who made the change (a device's, or
`api:…` with no username for the REST API).

Rule SQL names the lifecycle events as EMQX does: `FROM "$events/client/connected"` (or EMQX 4's
`"$events/client_connected"`) reads the `client.connected` rows (`EVENT_TOPICS` maps one to the
other).

Columns (nullable unless said): `tenant` (slug, never null), `ts` (UTC, millisecond timestamp,
never null: when the broker received it), `client_id`, `username` (`tenant/device`), `topic`,
`qos`, `retain`, `payload` (the bytes as published: never decoded, never base64),
`payload_format` (0/1, MQTT 5), `content_type`, `user_properties` (list of key/value pairs in
order; MQTT allows repeated keys), `message_expiry` (seconds), `response_topic`,
`correlation_data` (bytes), `reason`, `peer` (`host:port`), `proto_ver` (4 or 5), `keepalive`,
`clean_start`, `session_expiry`.

Layout in the object store
--------------------------
- Live segments, written by each broker about once a second, all tenants of that broker together
  (rows in arrival order, tenants interleaved):
  `archive/live/date={YYYY-MM-DD}/hour={HH}/{writer}-{sequence:010d}.parquet`
- History, compacted per tenant from the live segments once an hour is closed:
  `archive/tenant={slug}/date={YYYY-MM-DD}/hour={HH}/part-{round:04d}-{n:04d}.parquet` (large row
  groups, rows in time order per live segment). The hour's live folder then gets the marker
  `_COMPACTED`: a JSON manifest naming the live segments it covers and the history parts that hold
  them. It is written after the parts and before those segments are deleted, so a crash at any
  step leaves either the live segments in force (no marker, or not named in it) or the parts named
  by the marker, never both: a reader of an hour reads the parts the marker names plus any live
  segment the marker does not name (a late upload, compacted by the next round), and nothing
  else. History files the marker does not name are leftovers of an interrupted run and are
  ignored (the next run overwrites them). `common.archive.files` implements this protocol; use it
  rather than listing folders.
- Version 1 segments (gzip'd NDJSON, before Parquet) sit in the history folders as
  `*.ndjson.gz`; `read_ndjson_segment` turns one into rows of this schema.

Partition values (`date`, `hour`, and `tenant` in history folders) are in the keys only; the files
carry `tenant` as a column too, so a reader never needs partition discovery.

Message ids
-----------
Every archived row has a stable id, the same whichever form its hour is in: the key a rule
action's ledger remembers (`new-only` runs never fire twice for one message). It is
`{prefix}:{row}`, `row` the row's position in the object the broker wrote, `prefix` that
object's `message_id_prefix` (a live segment's `{writer}-{sequence}`, unique to it). Live
segments do not store it: readers derive it from the key and the row position. The compaction
copies it into the history parts as the optional column `message_id` (`HISTORY_SCHEMA`, a
superset of `ARCHIVE_SCHEMA`), before it sorts, so a message keeps its id in history. Objects
without the column (history parts compacted before the column existed, version 1 segments) get
ids derived the same way from their own keys: their rows never move again.
"""

from __future__ import annotations

import base64
import gzip
import json
from datetime import UTC, datetime

import pyarrow as pa

ARCHIVE_PREFIX = "archive"
LIVE_PREFIX = f"{ARCHIVE_PREFIX}/live"
COMPACTED_MARKER = "_COMPACTED"

EVENT_PUBLISH = "message.publish"
EVENT_CONNECTED = "client.connected"
EVENT_DISCONNECTED = "client.disconnected"
EVENT_SUBSCRIBED = "session.subscribed"
EVENT_UNSUBSCRIBED = "session.unsubscribed"
# Device shadows (data_plane.shadows): an accepted update, the delta it left, a deletion.
EVENT_SHADOW_UPDATED = "shadow.updated"
EVENT_SHADOW_DELTA = "shadow.delta"
EVENT_SHADOW_DELETED = "shadow.deleted"
SHADOW_EVENTS = {
    "updated": EVENT_SHADOW_UPDATED,
    "delta": EVENT_SHADOW_DELTA,
    "deleted": EVENT_SHADOW_DELETED,
}

# Rule SQL's FROM names for the lifecycle events: EMQX 5's (`$events/client/connected`) and the
# older ones it still takes (`$events/client_connected`). Other `$events/…` sources are EMQX
# events the archive has no rows for: a rule reading them takes nothing.
EVENT_TOPICS = {
    "$events/client/connected": EVENT_CONNECTED,
    "$events/client/disconnected": EVENT_DISCONNECTED,
    "$events/session/subscribed": EVENT_SUBSCRIBED,
    "$events/session/unsubscribed": EVENT_UNSUBSCRIBED,
    "$events/client_connected": EVENT_CONNECTED,
    "$events/client_disconnected": EVENT_DISCONNECTED,
    "$events/session_subscribed": EVENT_SUBSCRIBED,
    "$events/session_unsubscribed": EVENT_UNSUBSCRIBED,
    "$events/shadow/updated": EVENT_SHADOW_UPDATED,
    "$events/shadow/delta": EVENT_SHADOW_DELTA,
    "$events/shadow/deleted": EVENT_SHADOW_DELETED,
}

USER_PROPERTY = pa.struct([("key", pa.string()), ("value", pa.string())])

ARCHIVE_SCHEMA = pa.schema(
    [
        pa.field("event", pa.string(), nullable=False),
        pa.field("tenant", pa.string(), nullable=False),
        pa.field("ts", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("client_id", pa.string()),
        pa.field("username", pa.string()),
        pa.field("topic", pa.string()),
        pa.field("qos", pa.int8()),
        pa.field("retain", pa.bool_()),
        pa.field("payload", pa.binary()),
        pa.field("payload_format", pa.int8()),
        pa.field("content_type", pa.string()),
        pa.field("user_properties", pa.list_(USER_PROPERTY)),
        pa.field("message_expiry", pa.int64()),
        pa.field("response_topic", pa.string()),
        pa.field("correlation_data", pa.binary()),
        pa.field("reason", pa.string()),
        pa.field("peer", pa.string()),
        pa.field("proto_ver", pa.int8()),
        pa.field("keepalive", pa.int32()),
        pa.field("clean_start", pa.bool_()),
        pa.field("session_expiry", pa.int64()),
    ]
)
ARCHIVE_COLUMNS = tuple(ARCHIVE_SCHEMA.names)

MESSAGE_ID = "message_id"
# What history parts hold: the broker's columns plus each row's message id (optional: parts
# compacted before it existed lack it, and readers derive it; see "Message ids" above).
HISTORY_SCHEMA = ARCHIVE_SCHEMA.append(pa.field(MESSAGE_ID, pa.string()))


def message_id_prefix(key: str) -> str:
    """What the message ids of an object's rows start with: a live segment's
    `{writer}-{sequence}` (its file name, unique among every broker's segments), any other
    object's key below `archive/` without its extension (`tenant=acme/date=…/hour=…/part-…`)."""
    name = key.rsplit("/", 1)[-1]
    for suffix in (".parquet", ".ndjson.gz"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            key = key[: -len(suffix)]
            break
    if key.startswith(LIVE_PREFIX + "/"):
        return name
    return key.removeprefix(ARCHIVE_PREFIX + "/")


def message_ids(key: str, rows: int) -> pa.Array:
    """The derived message ids of an object's rows, in file order (`{prefix}:{row}`)."""
    import numpy as np
    import pyarrow.compute as pc

    positions = pc.cast(pa.array(np.arange(rows, dtype=np.int64)), pa.string())
    return pc.binary_join_element_wise(message_id_prefix(key) + ":", positions, "")


def hour_partition(ts_ms: int) -> str:
    """`date=YYYY-MM-DD/hour=HH` of a millisecond UTC timestamp."""
    return datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("date=%Y-%m-%d/hour=%H")


def live_segment_key(ts_ms: int, writer: str, sequence: int) -> str:
    return f"{LIVE_PREFIX}/{hour_partition(ts_ms)}/{writer}-{sequence:010d}.parquet"


def history_prefix(tenant: str, ts_ms: int) -> str:
    return f"{ARCHIVE_PREFIX}/tenant={tenant}/{hour_partition(ts_ms)}/"


def live_hour_prefix(ts_ms: int) -> str:
    """The live folder of the hour holding `ts_ms` (segments and, once compacted, the marker)."""
    return f"{LIVE_PREFIX}/{hour_partition(ts_ms)}/"


def history_part_key(tenant: str, ts_ms: int, round_: int, part: int) -> str:
    return f"{history_prefix(tenant, ts_ms)}part-{round_:04d}-{part:04d}.parquet"


def read_ndjson_segment(body: bytes) -> pa.Table:
    """A version 1 segment (gzip'd NDJSON, `payload` text or `payload_b64`) as version 2 rows."""
    rows = []
    for line in gzip.decompress(body).splitlines():
        if not line:
            continue
        old = json.loads(line)
        if old.get("payload_b64") is not None:
            payload = base64.b64decode(old["payload_b64"])
        else:
            payload = (old.get("payload") or "").encode()
        props = old.get("properties") or {}
        user_properties = [
            {"key": str(k), "value": str(v)} for k, v in props.get("user_property", []) or []
        ]
        rows.append(
            {
                "event": EVENT_PUBLISH,
                "tenant": old["tenant"],
                "ts": old["ts"],
                "client_id": old.get("client_id"),
                "username": None,
                "topic": old.get("topic"),
                "qos": old.get("qos"),
                "retain": old.get("retain"),
                "payload": payload,
                "payload_format": props.get("payload_format_indicator"),
                "content_type": props.get("content_type"),
                "user_properties": user_properties,
                "message_expiry": props.get("message_expiry_interval"),
                "response_topic": props.get("response_topic"),
                "correlation_data": _maybe_b64(props.get("correlation_data")),
            }
        )
    return pa.Table.from_pylist(rows, schema=ARCHIVE_SCHEMA)


def _maybe_b64(value: str | None) -> bytes | None:
    return base64.b64decode(value) if value is not None else None


# -- The usage log: the single source of the bill ------------------------------------------------
#
# One row per (tenant, minute, writer): what one writer (a broker, the rules job) metered for a
# tenant in that minute. Rows for the same tenant and minute add up (several brokers, a minute
# flushed in parts, the rules job beside the brokers); a reader sums, never picks one.
#
# Units are AWS IoT Core's: `messages` counts 5 KiB (5,120-byte) increments of each PUBLISH
# received, each delivery sent, each retained message stored, each CONNECT and SUBSCRIBE (size =
# payload + topic + properties); `connection_minutes` each minute a connection was open (partial
# minutes round up, per connection); `rules_triggered` 5 KiB increments of messages a rule
# evaluated (sized the same way: payload + topic + properties); `actions_executed` actions run; `storage_byte_hours` an hourly sample of bytes stored
# (retained, queued, archive), so a sample of B bytes adds B byte-hours; `shadow_operations`
# device shadow operations in AWS's 1 KiB units (an update of 1.5 KiB is 2; null in rows
# written before shadows existed, and by writers that meter none); `job_executions` job
# executions queued, new ones and retries (AWS's remote actions; null likewise: written by the
# control plane's `jobs` writer only, tenants/jobs/metering.py); `sink_bytes` the JSON bytes of
# the rule outputs a bucket (`s3`) sink took, in the minute it took them, as Kinesis Data
# Firehose meters GB ingested (null or 0 in every other writer's rows: only the live rules job's
# `rules-live` writer meters them, from its sink sender, spark/rules/sink_sender.py; the other
# sinks are metered as actions only). The plain counts
# (publishes_in, deliveries_out, bytes_in, bytes_out, dropped) are for charts, not for pricing.
#
# Layout: usage/date={YYYY-MM-DD}/hour={HH}/{writer}-{sequence:010d}.parquet (all tenants of
# one writer, rows sorted by (tenant, minute), the hour being the rows' minutes', so a late row
# lands in its own month's folders). Writers: a broker `{host}-{pid}-{random}` (data_plane/storage/
# usage_log.py: messages, connection_minutes and the plain counts), the rules job `rules-live` /
# `rules-backfill` (rules_triggered, actions_executed; `rules-live` also sink_bytes), the control
# plane's dead-letter replay
# `rules-replay.{random}` (actions_executed, one segment per replay) — the control plane adds the
# `rules-` segments to its usage table for the charts —, and the control plane's hourly storage sampler
# `storage` (tenants/usage/storage.py: storage_byte_hours, one row per tenant at the hour's
# start, in the one segment `storage-0000000000.parquet` of that hour: written once, so an hour
# is never sampled twice). Stored bytes = retained + queued messages (payload + topic +
# properties as stored) + the tenant's archive objects (history in full, its row share of the
# live segments not yet compacted). Every row is immutable once written;
# the billing job (spark/billing/job.py) sums all rows of a tenant's month and keeps a digest of
# them. Version 1 usage lines (gzip'd NDJSON under usage/tenant=…/) are not billed.

USAGE_PREFIX = "usage"
MESSAGE_UNIT_BYTES = 5120

USAGE_SCHEMA = pa.schema(
    [
        pa.field("tenant", pa.string(), nullable=False),
        pa.field("minute", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("writer", pa.string(), nullable=False),
        pa.field("messages", pa.int64(), nullable=False),
        pa.field("connection_minutes", pa.int64(), nullable=False),
        pa.field("rules_triggered", pa.int64(), nullable=False),
        pa.field("actions_executed", pa.int64(), nullable=False),
        pa.field("storage_byte_hours", pa.int64(), nullable=False),
        pa.field("publishes_in", pa.int64(), nullable=False),
        pa.field("deliveries_out", pa.int64(), nullable=False),
        pa.field("bytes_in", pa.int64(), nullable=False),
        pa.field("bytes_out", pa.int64(), nullable=False),
        pa.field("dropped", pa.int64(), nullable=False),
        pa.field("shadow_operations", pa.int64(), nullable=True),
        pa.field("job_executions", pa.int64(), nullable=True),
        pa.field("sink_bytes", pa.int64(), nullable=True),
    ]
)


def message_units(size: int) -> int:
    """Billable message units of a message of `size` bytes: 5 KiB increments, at least one."""
    return max(1, -(-size // MESSAGE_UNIT_BYTES))


def usage_segment_key(ts_ms: int, writer: str, sequence: int) -> str:
    return f"{USAGE_PREFIX}/{hour_partition(ts_ms)}/{writer}-{sequence:010d}.parquet"


# -- Per-device usage of the rules job (not the bill) ----------------------------------------------
#
# What the rules job did per device: `rules_triggered` (5 KiB units of the messages a rule
# evaluated) and `actions_executed`, per (tenant, device, minute, writer), the device being the
# publisher of the message (the part after `tenant/` of its `username`; "" when no device
# published it, e.g. a shadow change made through the REST API). The same work as the job's
# usage-log rows, split by device; the control plane adds them to `tenants_deviceusage` (each
# segment once, `tenants.billing.services.usage_log_rollup`) for the per-device views and the invoice
# CSV's drill-down. Never read by the billing job: the bill is the usage log's, per tenant.
# Layout: device-usage/date={YYYY-MM-DD}/hour={HH}/{writer}-{sequence:010d}.parquet.

DEVICE_USAGE_PREFIX = "device-usage"

DEVICE_USAGE_SCHEMA = pa.schema(
    [
        pa.field("tenant", pa.string(), nullable=False),
        pa.field("device", pa.string(), nullable=False),
        pa.field("minute", pa.timestamp("ms", tz="UTC"), nullable=False),
        pa.field("writer", pa.string(), nullable=False),
        pa.field("rules_triggered", pa.int64(), nullable=False),
        pa.field("actions_executed", pa.int64(), nullable=False),
    ]
)


def device_usage_segment_key(ts_ms: int, writer: str, sequence: int) -> str:
    return f"{DEVICE_USAGE_PREFIX}/{hour_partition(ts_ms)}/{writer}-{sequence:010d}.parquet"


def device_of_username(username: str | None) -> str:
    """The device a `tenant/device` user name names ("" for none): how `tenants_deviceusage`
    names a device, the name it connected with."""
    if not username or "/" not in username:
        return ""
    return username.split("/", 1)[1]

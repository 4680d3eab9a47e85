"""The journey: what happened to every message and in every client's life, one schema for the
broker that writes it and every reader (the REST API through DuckDB, tests, Spark).

Two streams, each its own set of Parquet files:

- `messages`: one row per outcome of a PUBLISH. The broker decides one outcome when the PUBLISH
  arrives (`delivered`, `no_subscribers`, or a refusal); a delivery that fails later at one
  subscriber (its queue overflowed, the message expired while queued, …) adds a row then, naming
  that subscriber in `subscriber`. A delivery dropped as the message arrived (an offline
  session's full queue, QoS 0 to an offline session, a slow QoS 0 reader) is linked both ways:
  the drop row and the message's own row share `message_id`, and the message's row counts it
  in `lost` (not in `queued`), so it tells the message's fate by itself. No payload is stored. The live rules job adds the rows of
  the tenant's rules (`rule_*` outcomes, the rule's name in `rule`): a rule matched the message
  (or failed on it), then each action's result, the error in `reason`.
- `clients`: one row per event in a client's life (connected, connect_failed, disconnected,
  taken_over, subscribed, unsubscribed, will_published, will_discarded, session_expired), with
  `version`, a number that only grows per (tenant, client id): sort by it and the order is never
  in doubt, whatever the clocks of the nodes say about `ts`. A takeover names both nodes: the
  `connected` row the node it came from (`from_node`), the `taken_over` row the node it went to
  (`to_node`).

Outcome names (the `outcome` column) are an API: more may be added, none is ever renamed.

Layout in the object store (`common.journey.files` reads and writes it)
--------------------------------------------------------------------
- Live segments, written by each broker every few seconds, all its tenants together, rows sorted
  by tenant (row-group statistics let a reader skip other tenants' rows):
  `journey/{stream}/live/date={YYYY-MM-DD}/hour={HH}/{writer}-{sequence:010d}.parquet`
- Per tenant once the hour has closed (`compact_journey`), one file per writer's segments:
  `journey/{stream}/tenant={slug}/date={YYYY-MM-DD}/hour={HH}/{writer}.parquet`; then the live
  hour gets `_COMPACTED` (a JSON list of the segments now in tenant files) and its segments go.
  Retention deletes a tenant's whole hour folders.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa

JOURNEY_PREFIX = "journey"
MESSAGES = "messages"
CLIENTS = "clients"
STREAMS = (MESSAGES, CLIENTS)
COMPACTED_MARKER = "_COMPACTED"

_TS = pa.timestamp("ms", tz="UTC")

MESSAGE_SCHEMA = pa.schema(
    [
        pa.field("tenant", pa.string(), nullable=False),
        pa.field("ts", _TS, nullable=False),
        pa.field("client_id", pa.string()),  # the publisher
        pa.field("topic", pa.string()),
        pa.field("qos", pa.int8()),
        pa.field("size", pa.int32()),  # payload bytes
        pa.field("packet_id", pa.int32()),  # the publisher's packet id (QoS 1/2), else null
        pa.field("outcome", pa.string(), nullable=False),
        pa.field("sessions", pa.int32()),  # delivered: sessions reached (another node: 1 each)
        pa.field("queued", pa.int32()),  # delivered: of those, offline sessions that queued it
        pa.field("reason", pa.string()),  # in words, for every outcome but `delivered`
        pa.field("reason_code", pa.int16()),  # the MQTT reason code the client got, if any
        pa.field("quota", pa.string()),  # quota_exceeded: the plan's key
        pa.field("subscriber", pa.string()),  # a later outcome: whose delivery it was
        pa.field("node", pa.string()),  # the broker that recorded it (rules: the rules job)
        pa.field("rule", pa.string()),  # the rule's name, in the rules' rows
        # A message some subscriber dropped as it arrived: its id, on its own row and on each
        # drop row (files before these two columns read them as null), and on its own row how
        # many of `sessions` dropped it (the causes in `reason`).
        pa.field("message_id", pa.string()),
        pa.field("lost", pa.int32()),
        # The rules' rows: milliseconds from the publish to this row (the match evaluated, the
        # action done); null elsewhere and in files before the column.
        pa.field("latency_ms", pa.int32()),
    ]
)

CLIENT_SCHEMA = pa.schema(
    [
        pa.field("tenant", pa.string(), nullable=False),
        pa.field("ts", _TS, nullable=False),
        pa.field("client_id", pa.string(), nullable=False),
        pa.field("event", pa.string(), nullable=False),
        pa.field("version", pa.int64(), nullable=False),
        pa.field("reason_code", pa.int16()),
        pa.field("reason", pa.string()),
        pa.field("initiator", pa.string()),  # disconnected: `client` or `server`
        pa.field("detail", pa.string()),  # a filter and its QoS, the address, the other node …
        pa.field("node", pa.string()),
        # A takeover (the segments before these two columns read them as null): `connected`
        # names the node the session was taken over from, `taken_over` the node whose
        # connection took it; either equals `node` for a takeover within one node.
        pa.field("from_node", pa.string()),
        pa.field("to_node", pa.string()),
    ]
)

SCHEMAS = {MESSAGES: MESSAGE_SCHEMA, CLIENTS: CLIENT_SCHEMA}

# -- outcomes ------------------------------------------------------------------------------------

DELIVERED = "delivered"
NO_SUBSCRIBERS = "no_subscribers"
ACL_DENIED = "acl_denied"
QUOTA_EXCEEDED = "quota_exceeded"
QUEUE_FULL = "queue_full"
EXPIRED = "expired"
TOO_LARGE = "too_large"
DROPPED = "dropped"
SERVED = "served"  # a device shadow or jobs request: the broker's service took it, not routed
# Written by the live rules job (`spark/rules/journey.py`), not the broker:
RULE_MATCHED = "rule_matched"  # the rule's WHERE held: its outputs go to its actions
RULE_FAILED = "rule_failed"  # evaluating the rule failed on the message (or went over a budget)
RULE_ACTION_OK = "rule_action_ok"  # one action of one output done
RULE_ACTION_FAILED = "rule_action_failed"  # … failed for good (a dead letter), or will retry
ALARM_CHANGED = "alarm_changed"  # an alarm's key changed state on the message (issue 46)

BROKER_OUTCOMES = (
    DELIVERED,
    NO_SUBSCRIBERS,
    ACL_DENIED,
    QUOTA_EXCEEDED,
    QUEUE_FULL,
    EXPIRED,
    TOO_LARGE,
    DROPPED,
    SERVED,
)
RULE_OUTCOMES = (RULE_MATCHED, RULE_FAILED, RULE_ACTION_OK, RULE_ACTION_FAILED, ALARM_CHANGED)
OUTCOMES = (*BROKER_OUTCOMES, *RULE_OUTCOMES)
# Outcomes that lost the message for someone: what a portal's "dropped" or "refused" links to.
LOSSES = tuple(o for o in BROKER_OUTCOMES if o not in (DELIVERED, NO_SUBSCRIBERS, SERVED))

CLIENT_EVENTS = (
    "connected",
    "connect_failed",
    "disconnected",
    "taken_over",
    "subscribed",
    "unsubscribed",
    "will_published",
    "will_discarded",
    "session_expired",
    "replayed",  # a `$replay` subscription's history went out (detail: filter, from, how many)
)

# -- keys ----------------------------------------------------------------------------------------


def hour_partition(ts_ms: int) -> str:
    moment = datetime.fromtimestamp(ts_ms / 1000, UTC)
    return f"date={moment:%Y-%m-%d}/hour={moment:%H}"


def live_prefix(stream: str) -> str:
    return f"{JOURNEY_PREFIX}/{stream}/live"


def live_segment_key(stream: str, ts_ms: int, writer: str, sequence: int) -> str:
    return f"{live_prefix(stream)}/{hour_partition(ts_ms)}/{writer}-{sequence:010d}.parquet"


def tenant_prefix(stream: str, tenant: str) -> str:
    return f"{JOURNEY_PREFIX}/{stream}/tenant={tenant}"


def tenant_file_key(stream: str, tenant: str, ts_ms: int, writer: str) -> str:
    return f"{tenant_prefix(stream, tenant)}/{hour_partition(ts_ms)}/{writer}.parquet"

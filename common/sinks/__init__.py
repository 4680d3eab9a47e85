"""The sink writers: rule outputs into the stores tenants already use.

A rule action whose `type` is one of `SINK_TYPES` puts its outputs in a durable outbox (the rules
job's part); a delivery lane takes a batch of them (`batch_limits`) and hands it to the action's
writer (`writer_for`), which answers a `Result` per record. The writers are a plain library: no
Django, no Spark; the control plane's connection test is `check_action`.

    writer = writer_for({"type": "sqs", "queue_url": ..., ...}, tenant="acme")
    results = writer.send(records)      # a Result per Record, same order; never raises for
    writer.close()                      # trouble at the far end

Each type is one module (`s3`, `sqs`, `kinesis`, `postgres`, `mqtt_bridge`, `http_batch`); every
host a writer connects to is vetted like a webhook's destination (`endpoints`). A writer's
settings come from the stored action with its secrets already opened; a setting that is missing
or malformed is a ValueError in words from `writer_for` (nothing is connected there).
"""

from __future__ import annotations

from typing import Any

from common.sinks.base import Record, Result, SinkWriter

__all__ = [
    "SINK_NAMES",
    "SINK_TYPES",
    "Record",
    "Result",
    "SinkWriter",
    "batch_limits",
    "check_action",
    "writer_for",
]

SINK_TYPES = ("s3", "sqs", "kinesis", "postgres", "mqtt_bridge", "http_batch")
# The setting that names a sink among a rule's actions (an output waiting for a retry, or a
# dead letter, finds its action again by it).
SINK_NAMES = {"s3": "bucket", "sqs": "queue_url", "kinesis": "stream", "postgres": "table",
              "mqtt_bridge": "host", "http_batch": "url"}  # fmt: skip


def writer_for(action: dict[str, Any], tenant: str) -> SinkWriter:
    """The writer for a sink action (secrets opened); ValueError in words for bad settings."""
    kind = action.get("type")
    if kind == "s3":
        from common.sinks.s3 import S3Writer

        return S3Writer(action, tenant)
    if kind == "sqs":
        from common.sinks.sqs import SqsWriter

        return SqsWriter(action, tenant)
    if kind == "kinesis":
        from common.sinks.kinesis import KinesisWriter

        return KinesisWriter(action, tenant)
    if kind == "postgres":
        from common.sinks.postgres import PostgresWriter

        return PostgresWriter(action, tenant)
    if kind == "mqtt_bridge":
        from common.sinks.mqtt_bridge import MqttBridgeWriter

        return MqttBridgeWriter(action, tenant)
    if kind == "http_batch":
        from common.sinks.http_batch import HttpBatchWriter

        return HttpBatchWriter(action, tenant)
    raise ValueError(f"{kind!r} is not a sink type (one of {', '.join(SINK_TYPES)})")


def check_action(action: dict[str, Any], tenant: str) -> str | None:
    """The connection test: None when the sink's far end is reachable and writable, else
    words (bad settings included)."""
    try:
        writer = writer_for(action, tenant)
    except ValueError as exc:
        return str(exc)
    try:
        return writer.check()
    except Exception as exc:  # a writer's check answers in words; this is the last guard
        return f"the connection test failed ({type(exc).__name__})"
    finally:
        writer.close()


# (most records, most bytes of the outputs' JSON text) one send takes, by type:
_LIMITS = {
    "s3": (10_000, 16 << 20),  # one object per hour of a send: objects of a useful size
    "sqs": (100, 2 << 20),  # ten SendMessageBatch calls of 10 (SQS's limit per call)
    "kinesis": (500, 5 << 20),  # one PutRecords call (Kinesis's limits per call)
    "postgres": (1000, 8 << 20),  # one INSERT of 1000 rows: one round trip, one transaction
    "mqtt_bridge": (500, 4 << 20),  # a few windows of publishes (64 unacknowledged at once)
    "http_batch": (500, 1 << 20),  # one request a receiver takes in one read
}


def batch_limits(action: dict[str, Any]) -> tuple[int, int]:
    """(most records, most bytes of their bodies) one send() takes for this action's type."""
    kind = action.get("type")
    if kind not in _LIMITS:
        raise ValueError(f"{kind!r} is not a sink type (one of {', '.join(SINK_TYPES)})")
    return _LIMITS[str(kind)]

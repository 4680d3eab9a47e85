"""Metering for the bill: what the rule jobs did per tenant per minute, as usage-log rows.

`rules_triggered` counts 5 KiB units (`message_units`) of each message a rule evaluated (one per
rule per message, as AWS IoT Core counts), the message sized as every message unit is: payload +
topic (UTF-8) + properties as MQTT 5 encodes them (`spark.rules.plan.native_units`);
`actions_executed` each action run (a dead letter replayed later is metered by the control plane,
`tenants.billing.actions_replayed_record`). Both are billed in the minute the work was done. Rows go to the object store as USAGE_SCHEMA Parquet under
`usage_segment_key` with writer `rules-live` or `rules-backfill`; the billing job sums them with
the brokers' rows.
"""

from __future__ import annotations

import os
import secrets
import time
from collections import defaultdict
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from common.archive_schema import USAGE_SCHEMA, usage_segment_key
from common.object_store import ObjectStore


@dataclass
class UsageTally:
    writer: str  # rules-live | rules-backfill
    counts: dict[tuple[str, int], list[int]] = field(default_factory=lambda: defaultdict(_zero))

    def add(self, tenant: str, *, rules_triggered: int = 0, actions_executed: int = 0) -> None:
        minute = int(time.time() // 60 * 60_000)
        entry = self.counts[(tenant, minute)]
        entry[0] += rules_triggered
        entry[1] += actions_executed

    def table(self) -> pa.Table:
        rows = [
            {
                "tenant": tenant,
                "minute": minute,
                "writer": self.writer,
                "messages": 0,
                "connection_minutes": 0,
                "rules_triggered": triggered,
                "actions_executed": executed,
                "storage_byte_hours": 0,
                "publishes_in": 0,
                "deliveries_out": 0,
                "bytes_in": 0,
                "bytes_out": 0,
                "dropped": 0,
            }
            for (tenant, minute), (triggered, executed) in sorted(self.counts.items())
            if triggered or executed
        ]
        return pa.Table.from_pylist(rows, schema=USAGE_SCHEMA)


def _zero() -> list[int]:
    return [0, 0]


class UsageWriter:
    """Flushes tallies as segments; keys carry a per-process id so writers never collide."""

    def __init__(self, store: ObjectStore, writer: str) -> None:
        self.store = store
        self.writer = writer
        self.key_writer = f"{writer}.{os.getpid():x}{secrets.token_hex(3)}"
        self.sequence = 0

    def new_tally(self) -> UsageTally:
        return UsageTally(self.writer)

    def flush(self, tally: UsageTally) -> str | None:
        table = tally.table()
        if not table.num_rows:
            return None
        self.sequence += 1
        key = usage_segment_key(int(time.time() * 1000), self.key_writer, self.sequence)
        buffer = pa.BufferOutputStream()
        pq.write_table(table, buffer, compression="zstd")
        self.store.put(key, buffer.getvalue().to_pybytes())
        return key

"""Metering for the bill: what the rule jobs did per tenant per minute, as usage-log rows.

`rules_triggered` counts 5 KiB units (`message_units`) of each message a rule evaluated (one per
rule per message, as AWS IoT Core counts), the message sized as every message unit is: payload +
topic (UTF-8) + properties as MQTT 5 encodes them (`spark.rules.plan.native_units`);
`actions_executed` each action run (a dead letter replayed later is metered by the control plane,
`tenants.billing.services.actions_replayed_record`). Both are billed in the minute the work was done. Rows go to the object store as USAGE_SCHEMA Parquet under
`usage_segment_key` with writer `rules-live` or `rules-backfill`; the billing job sums them with
the brokers' rows.

`sink_bytes` counts the JSON bytes of the outputs a bucket (`s3`) sink took, in the minute it
took them: the live job's sink sender reports each delivery to a `SinkBytes` (its worker threads
settle while the job's batch thread flushes), which the job drains into each tally it flushes.

The same work is also tallied per device, the publisher of the message a rule evaluated (for an
action, of the message whose output it acted on), named as `tenants_deviceusage` names devices
(`common.archive.schema.device_of_username`: the name it connected with), and written beside
each usage segment as a DEVICE_USAGE_SCHEMA segment, for the per-device views; never billed.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

from common.archive.schema import (
    DEVICE_USAGE_SCHEMA,
    USAGE_SCHEMA,
    device_usage_segment_key,
    usage_segment_key,
)
from common.stores.object_store import ObjectStore


@dataclass
class UsageTally:
    writer: str  # rules-live | rules-backfill
    counts: dict[tuple[str, int], list[int]] = field(default_factory=lambda: defaultdict(_zero))
    # (tenant, device, minute) -> [rules triggered, actions executed]: the same work by device
    devices: dict[tuple[str, str, int], list[int]] = field(
        default_factory=lambda: defaultdict(_zero)
    )
    device_key: str | None = None  # its device segment's key, once chosen (a retry rewrites it)
    # (tenant, minute) -> JSON bytes of outputs bucket sinks took (`SinkBytes.drain_into`)
    sink_bytes: dict[tuple[str, int], int] = field(default_factory=lambda: defaultdict(int))

    def add(self, tenant: str, *, rules_triggered: int = 0, actions_executed: int = 0) -> None:
        minute = int(time.time() // 60 * 60_000)
        entry = self.counts[(tenant, minute)]
        entry[0] += rules_triggered
        entry[1] += actions_executed

    def add_device(
        self, tenant: str, device: str, *, rules_triggered: int = 0, actions_executed: int = 0
    ) -> None:
        """Work already counted for the tenant (`add`), told again by the device it was for."""
        minute = int(time.time() // 60 * 60_000)
        entry = self.devices[(tenant, device, minute)]
        entry[0] += rules_triggered
        entry[1] += actions_executed

    def device_table(self) -> pa.Table:
        rows = [
            {
                "tenant": tenant,
                "device": device,
                "minute": minute,
                "writer": self.writer,
                "rules_triggered": triggered,
                "actions_executed": executed,
            }
            for (tenant, device, minute), (triggered, executed) in sorted(self.devices.items())
            if triggered or executed
        ]
        return pa.Table.from_pylist(rows, schema=DEVICE_USAGE_SCHEMA)

    def table(self) -> pa.Table:
        rows = []
        for tenant, minute in sorted(set(self.counts) | set(self.sink_bytes)):
            triggered, executed = self.counts.get((tenant, minute), (0, 0))
            delivered = self.sink_bytes.get((tenant, minute), 0)
            if not (triggered or executed or delivered):
                continue
            rows.append(
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
                    # null where no bucket sink took anything: such rows stay what they were
                    "sink_bytes": delivered or None,
                }
            )
        return pa.Table.from_pylist(rows, schema=USAGE_SCHEMA)


def _zero() -> list[int]:
    return [0, 0]


class SinkBytes:
    """The bytes bucket sinks took, per (tenant, minute taken), between two flushes of the live
    job's usage: `add` from the sink sender's worker threads, `drain_into` from the thread that
    flushes a tally. Its own lock: a tally is never shared between threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bytes: dict[tuple[str, int], int] = defaultdict(int)

    def add(self, tenant: str, delivered: int) -> None:
        """`delivered` JSON bytes of `tenant`'s outputs a bucket sink took, now."""
        if delivered <= 0:
            return
        minute = int(time.time() // 60 * 60_000)
        with self._lock:
            self._bytes[(tenant, minute)] += delivered

    def drain_into(self, tally: UsageTally) -> None:
        """Move what was added so far into `tally` (to be flushed with it)."""
        with self._lock:
            taken, self._bytes = self._bytes, defaultdict(int)
        for key, delivered in taken.items():
            tally.sink_bytes[key] += delivered


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
        """Write the tally's device segment, then its usage segment (the bill). The device
        segment's key is chosen once per tally: a flush retried after the usage write failed
        rewrites the same object, so a device's figures are never counted twice."""
        devices = tally.device_table()
        if devices.num_rows:
            if tally.device_key is None:
                self.sequence += 1
                tally.device_key = device_usage_segment_key(
                    int(time.time() * 1000), self.key_writer, self.sequence
                )
            self.store.put(tally.device_key, _parquet(devices))
        table = tally.table()
        if not table.num_rows:
            return None
        self.sequence += 1
        key = usage_segment_key(int(time.time() * 1000), self.key_writer, self.sequence)
        self.store.put(key, _parquet(table))
        return key


def _parquet(table: pa.Table) -> bytes:
    buffer = pa.BufferOutputStream()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue().to_pybytes()

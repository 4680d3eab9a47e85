"""The usage log writer: one Parquet file per hour touched, rows sorted; while the object store
is away rows stay buffered (bounded, the loss counted) and go out on the next flush."""

from __future__ import annotations

import asyncio
import io
from datetime import UTC, datetime, timedelta

import pyarrow.parquet as pq

from common.stores.object_store import LocalObjectStore
from data_plane.storage.usage_log import UsageLogWriter
from tests.billing.usage_rows import row

T0 = datetime(2026, 9, 1, 10, 58, tzinfo=UTC)


class FlakyStore(LocalObjectStore):
    down = True

    def put(self, key: str, data: bytes) -> None:
        if self.down:
            raise ConnectionError("object store unreachable")
        super().put(key, data)


def test_segments_per_hour_sorted_and_retried_after_an_outage(tmp_path):
    store = FlakyStore(tmp_path)
    writer = UsageLogWriter(store, writer_id="b1", max_age=0)
    rows = [
        row(t, T0 + timedelta(minutes=m), messages=m + 1) for m in range(4) for t in ("zed", "acme")
    ]
    writer.append(rows)
    try:
        asyncio.run(writer.flush())
        raise AssertionError("the flush should have failed")
    except ConnectionError:
        pass
    assert writer.pending() == len(rows) and store.list("usage/") == []
    store.down = False
    assert asyncio.run(writer.flush()) == len(rows)
    keys = store.list("usage/")
    assert keys == [  # a failed attempt used sequence 1: numbers are never reused
        "usage/date=2026-09-01/hour=10/b1-0000000002.parquet",
        "usage/date=2026-09-01/hour=11/b1-0000000003.parquet",
    ]
    first = pq.read_table(io.BytesIO(store.get(keys[0]))).to_pylist()
    assert [(r["tenant"], r["minute"].minute) for r in first] == [
        ("acme", 58),
        ("acme", 59),
        ("zed", 58),
        ("zed", 59),
    ]
    assert writer.rows_written == len(rows) and writer.rows_lost == 0


def test_the_buffer_is_bounded_and_counts_what_it_gives_up(tmp_path):
    writer = UsageLogWriter(FlakyStore(tmp_path), writer_id="b1", max_rows=5)
    writer.append([row("acme", T0 + timedelta(minutes=m)) for m in range(8)])
    assert writer.pending() == 5 and writer.rows_lost == 3


def test_the_rules_jobs_rows_reach_the_portals_usage_minutes_once(db, tmp_path):
    from tenants.billing import services as billing
    from tenants.models import Usage
    from tenants.tenant import services as tenant_services

    acme = tenant_services.tenant_create("acme")
    store = LocalObjectStore(tmp_path)
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    Usage.objects.create(tenant=acme, minute=now, message_units=5)  # the broker's minute
    rules = UsageLogWriter(store, writer_id="rules-live")
    rules.append([row("acme", now, writer="rules-live", rules_triggered=3, actions_executed=2)])
    rules.append([row("ghost", now, writer="rules-live", rules_triggered=9)])  # no such tenant
    rules.write_pending()
    broker = UsageLogWriter(store, writer_id="broker-1")  # the broker's own rows: not again
    broker.append([row("acme", now, writer="broker-1", messages=5, rules_triggered=100)])
    broker.write_pending()
    assert billing.usage_log_rollup(now=now, store=store) == {"segments": 1, "rows": 2}
    assert billing.usage_log_rollup(now=now, store=store) == {"segments": 0, "rows": 0}
    (minute,) = Usage.objects.filter(tenant=acme)
    assert (minute.message_units, minute.rules_triggered, minute.actions_executed) == (5, 3, 2)

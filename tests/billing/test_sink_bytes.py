"""The data rule outputs deliver to bucket sinks, metered in bytes (issue 47, point 4, as Kinesis
Data Firehose meters GB ingested): the usage log's `sink_bytes`, rolled up into the usage minutes
the portal and `GET /api/v1/usage` read."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.parquet as pq

from common.archive.schema import USAGE_SCHEMA, usage_segment_key
from common.stores.object_store import LocalObjectStore
from spark.rules.metering import SinkBytes, UsageWriter
from tests.api.conftest import acme, attacker  # noqa: F401 (fixtures)
from tests.billing.usage_rows import row

OLD_SCHEMA = pa.schema([f for f in USAGE_SCHEMA if f.name != "sink_bytes"])


def old_segment(store: LocalObjectStore, rows: list[dict], writer: str, at: datetime) -> str:
    """A segment as writers wrote them before the column existed: no `sink_bytes` at all."""
    table = pa.Table.from_pylist(
        [{k: v for k, v in r.items() if k != "sink_bytes"} for r in rows], schema=OLD_SCHEMA
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    key = usage_segment_key(int(at.timestamp() * 1000), writer, 1)
    store.put(key, sink.getvalue())
    return key


def rolled_up(store: LocalObjectStore) -> datetime:
    """The live job's rules segment with the bytes S3 sinks took for acme (1.5 MB), beside one
    from before the column, rolled up into the usage minutes; returns the minute."""
    from tenants.billing import services as billing

    now = datetime.now(UTC).replace(second=0, microsecond=0)
    old_segment(store, [row("acme", now, "rules-live", actions_executed=3)], "rules-live.0", now)
    meter = SinkBytes()
    meter.add("acme", 1_500_000)
    meter.add("ghost", 99)  # no such tenant: nobody's
    writer = UsageWriter(store, "rules-live")
    tally = writer.new_tally()
    meter.drain_into(tally)
    assert writer.flush(tally) is not None
    assert billing.usage_log_rollup(now=now, store=store)["segments"] == 2
    return now


def test_the_rules_jobs_sink_bytes_reach_the_usage_minutes_and_the_usage_api(
    acme,  # noqa: F811
    attacker,  # noqa: F811
    tmp_path,
):
    from tenants.billing import services as billing
    from tenants.models import Usage

    tenant, api = acme
    store = LocalObjectStore(tmp_path)
    now = rolled_up(store)
    assert billing.usage_log_rollup(now=now, store=store)["segments"] == 0  # each once
    minutes = Usage.objects.filter(tenant=tenant)
    assert sum(m.sink_bytes for m in minutes) == 1_500_000
    assert sum(m.actions_executed for m in minutes) == 3  # the older segment, read as before

    day = now.date()
    query = f"from={day.isoformat()}&to={(day + timedelta(days=1)).isoformat()}&granularity=day"
    (point,) = api.get(f"/api/v1/usage?{query}").json()["series"]
    assert (point["sink_bytes"], point["sink_gb"]) == (1_500_000, 0.0015)
    since = (now - timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    raw = api.get("/api/v1/usage", {"since": since}).json()["results"]
    assert sum(m["sink_bytes"] for m in raw) == 1_500_000
    _, evil = attacker
    (theirs,) = evil.get(f"/api/v1/usage?{query}").json()["series"]
    assert theirs["sink_bytes"] == 0

"""Preview of a rule over a day of one tenant's history (issue 31's bench: ≤ 5 s for 1M messages
on the embedded default), beside DuckDB reading the same files directly.

    .venv/bin/python -m bench.rule_preview [--messages 1000000] [--runs 5] [--dir /tmp/rule-preview-bench]

The archive is generated with pyarrow as the platform leaves it at the end of a day: 22 hours
compacted (per-tenant history parts, a `_COMPACTED` manifest per hour naming them) and the last
2 hours still as the brokers' live segments (every tenant interleaved, one segment a minute).
Tenant `bench` published `--messages` device JSON readings (~300 bytes each: device, sequence,
temperature, humidity, a site object, status, battery, firmware, two readings) over the day;
`--tenants` other tenants published as many each, on the same topics, beside it. The rule:

    SELECT payload.site.id AS site, payload.temp AS temp, clientid FROM "sensors/+/telemetry"
    WHERE payload.temp > 90 AND payload.site.id = 7

Timed, p50 (and min, max) over `--runs` runs, after one warm-up:
- the preview as the API runs it (`common.rule_preview.preview`: the marker protocol's listing,
  DuckDB over the tenant's files with the rule's native form and its exactness checks, the
  evaluator for what DuckDB is not sure of, the first outputs through the evaluator);
- DuckDB reading the same files directly with the equivalent plain SQL (no listing, no
  exactness checks, no evaluator): what the engine alone costs.
Both must give the same count. Also one preview of a rule with no native form (a function in
the SELECT: every row through the evaluator, cut at the preview's time), to show that bound.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from common.archive.files import Manifest, archive_files, encode_parquet
from common.archive.schema import (
    ARCHIVE_SCHEMA,
    COMPACTED_MARKER,
    history_part_key,
    live_hour_prefix,
    live_segment_key,
)
from common.stores.object_store import LocalObjectStore

HOUR_MS = 3_600_000
DAY = datetime(2026, 1, 1, tzinfo=UTC)
LIVE_HOURS = 2  # the day's last hours, not compacted yet
RULE = (
    'SELECT payload.site.id AS site, payload.temp AS temp, clientid FROM "sensors/+/telemetry" '
    "WHERE payload.temp > 90 AND payload.site.id = 7"
)
SLOW_RULE = 'SELECT upper(payload.status) AS s FROM "sensors/+/telemetry" WHERE payload.temp > 90'


def readings(tenant: str, start_ms: int, rows: int, seed: int) -> pa.Table:
    """`rows` device JSON messages of `tenant` spread over one hour from `start_ms`."""
    rng = np.random.default_rng(seed)
    device = rng.integers(0, 500, rows)
    text = pc.binary_join_element_wise(
        '{"device": "sensor-',
        pc.cast(pa.array(device), pa.string()),
        '", "seq": ',
        pc.cast(pa.array(np.arange(rows) + seed * 1_000_000), pa.string()),
        ', "temp": ',
        pc.cast(pa.array(np.round(rng.uniform(0, 100, rows), 1)), pa.string()),
        ', "humidity": ',
        pc.cast(pa.array(np.round(rng.uniform(10, 90, rows), 2)), pa.string()),
        ', "site": {"id": ',
        pc.cast(pa.array(rng.integers(0, 10, rows)), pa.string()),
        ', "name": "plant-north", "zone": "B7"}, "status": "ok", "battery": ',
        pc.cast(pa.array(rng.integers(20, 100, rows)), pa.string()),
        ', "firmware": "2.4.1", "readings": [{"sensor": "co2", "value": ',
        pc.cast(pa.array(np.round(rng.uniform(380, 900, rows), 1)), pa.string()),
        '}, {"sensor": "pressure", "value": 1013.2}]}',
        "",
    )
    client = pc.binary_join_element_wise("sensor-", pc.cast(pa.array(device), pa.string()), "")
    columns = {n: pa.nulls(rows, ARCHIVE_SCHEMA.field(n).type) for n in ARCHIVE_SCHEMA.names}
    columns.update(
        event=pa.array(["message.publish"] * rows),
        tenant=pa.array([tenant] * rows),
        ts=pa.array(
            start_ms + np.sort(rng.integers(0, HOUR_MS, rows)), pa.timestamp("ms", tz="UTC")
        ),
        client_id=client,
        username=pc.binary_join_element_wise(f"{tenant}/", client, ""),
        topic=pc.binary_join_element_wise("sensors/", client, "/telemetry", ""),
        qos=pa.array(np.ones(rows, dtype=np.int8)),
        retain=pa.array(np.zeros(rows, dtype=bool)),
        payload=pc.cast(text, pa.binary()),
    )
    return pa.table(columns).cast(ARCHIVE_SCHEMA)


def generate(store: LocalObjectStore, messages: int, others: int) -> None:
    tenants = ["bench", *(f"other-{i}" for i in range(others))]
    per_hour = -(-messages // 24)
    for hour in range(24):
        hour_ms = int(DAY.timestamp() * 1000) + hour * HOUR_MS
        rows = min(per_hour, messages - hour * per_hour)
        tables = [readings(t, hour_ms, rows, seed=hour * 100 + i) for i, t in enumerate(tenants)]
        if hour < 24 - LIVE_HOURS:
            parts = []
            for tenant, table in zip(tenants, tables, strict=True):
                key = history_part_key(tenant, hour_ms, 0, 0)
                store.put(key, encode_parquet(table, row_group_size=1_000_000))
                parts.append(key)
            manifest = Manifest(segments=[], parts=parts, rounds=1, rows=rows * len(tenants))
            store.put(live_hour_prefix(hour_ms) + COMPACTED_MARKER, manifest.encode())
            continue
        # Live segments: one a minute, every tenant's rows of that minute, interleaved.
        mixed = pa.concat_tables(tables).sort_by([("ts", "ascending")])
        minute = pc.divide(pc.cast(mixed["ts"], pa.int64()), 60_000)
        for index, value in enumerate(pc.unique(minute).to_pylist()):
            segment = mixed.filter(pc.equal(minute, value))
            key = live_segment_key(value * 60_000, "broker-a", hour * 100 + index)
            store.put(key, encode_parquet(segment))


def time_preview(store, sql: str, runs: int) -> tuple[list[float], object]:
    from common.rule_preview import preview

    end = DAY.replace(day=2)
    result = preview(store, "bench", sql, DAY, end, rule_id=1)  # warm-up
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        result = preview(store, "bench", sql, DAY, end, rule_id=1)
        seconds.append(time.perf_counter() - started)
    return seconds, result


def time_duckdb(store, runs: int) -> tuple[list[float], int]:
    import duckdb

    files = archive_files(store, DAY, DAY.replace(day=2), "bench")
    listing = ", ".join(f"'{store.root / f.key}'" for f in files)
    con = duckdb.connect()
    query = f"""
        SELECT count(*) FROM read_parquet([{listing}])
        WHERE tenant = 'bench' AND topic LIKE 'sensors/%/telemetry'
          AND CAST(json_extract(decode(payload), '$.temp') AS DOUBLE) > 90
          AND CAST(json_extract(decode(payload), '$.site.id') AS BIGINT) = 7
    """
    return timed_count(con, query, runs)


def timed_count(con, query: str, runs: int) -> tuple[list[float], int]:
    """`query`'s count, and its time over `runs` runs after a warm-up."""
    count = con.execute(query).fetchall()[0][0]  # warm-up
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        count = con.execute(query).fetchall()[0][0]
        seconds.append(time.perf_counter() - started)
    return seconds, count


def figures(seconds: list[float]) -> str:
    return (
        f"p50 {statistics.median(seconds):.2f} s (min {min(seconds):.2f}, max {max(seconds):.2f})"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="of tenant bench")
    parser.add_argument("--tenants", type=int, default=3, help="other tenants beside it")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dir", default="/tmp/rule-preview-bench")
    args = parser.parse_args(argv)
    store = LocalObjectStore(Path(args.dir))
    store.clear()
    started = time.monotonic()
    generate(store, args.messages, args.tenants)
    size = sum(store.sizes("archive/").values())
    print(
        f"generated {args.messages:,} messages of bench (+{args.tenants} tenants x as many), "
        f"{size / 2**20:.0f} MiB, in {time.monotonic() - started:.0f} s"
    )
    load = os.getloadavg()
    print(f"cores {os.cpu_count()}, load average {load[0]:.1f} at start")
    preview_s, result = time_preview(store, RULE, args.runs)
    print(
        f"preview: {figures(preview_s)}; read {result.read:,}, matched {result.matched:,}, "
        f"failed {result.failed}, decided by DuckDB {result.decided_natively:,}, "
        f"first output {json.dumps(result.outputs[0])}"
    )
    duck_s, count = time_duckdb(store, args.runs)
    print(f"duckdb direct: {figures(duck_s)}; {count:,} rows")
    assert count == result.matched, "the preview and DuckDB disagree"
    slow_s, slow = time_preview(store, SLOW_RULE, 1)
    print(
        f"preview, rule with no native form: {slow_s[0]:.2f} s; complete {slow.complete}, "
        f"evaluated {slow.considered - slow.unevaluated:,} of {slow.considered:,}, "
        f"matched so far {slow.matched:,}"
    )
    print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

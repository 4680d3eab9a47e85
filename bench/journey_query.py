"""How fast a tenant's journey answers (issue 30: "within 2 s for a day of a tenant's traffic on
the embedded default"): one tenant's day of rows (1M by default) among other tenants', laid out
as the brokers and `journey_upkeep` leave them — 23 closed hours compacted into a file per
tenant, the current hour late in it (one segment per writer every 2 s, compacted in rounds of
150: 11 parts per tenant and the last segments still live) — in a local
object store; then the API's queries through `tenants.journey.selectors.JourneyReader` (DuckDB), p50 and
p99 over repeated runs, beside DuckDB reading the same files with one plain SQL query.

    .venv/bin/python -m bench.journey_query [--rows 1000000] [--tenants 10] [--runs 10]
        [--segments 1800]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow as pa

from common.journey.files import OPEN_HOUR_SEGMENTS, compact_hour, journey_files
from common.journey.schema import MESSAGE_SCHEMA, MESSAGES, live_segment_key
from common.stores.object_store import LocalObjectStore
from data_plane.observability.journey_writer import encode

OUTCOMES = ["delivered"] * 90 + ["no_subscribers"] * 7 + ["queue_full", "acl_denied", "expired"]


def rows(tenant: str, count: int, start_ms: int, span_ms: int, rng: random.Random) -> pa.Table:
    ts = sorted(start_ms + rng.randrange(span_ms) for _ in range(count))
    outcomes = [rng.choice(OUTCOMES) for _ in range(count)]
    devices = [f"dev-{rng.randrange(500)}" for _ in range(count)]
    return pa.table(
        {
            "tenant": [tenant] * count,
            "ts": pa.array(ts, pa.int64()).cast(pa.timestamp("ms", tz="UTC")),
            "client_id": devices,
            "topic": [f"sensors/{d}/{rng.choice(('temp', 'hum', 'power'))}" for d in devices],
            "qos": [1] * count,
            "size": [rng.randrange(200, 1200) for _ in range(count)],
            "packet_id": [rng.randrange(1, 65535) for _ in range(count)],
            "outcome": outcomes,
            "sessions": [1 if o == "delivered" else 0 for o in outcomes],
            "queued": [0] * count,
            "reason": [None if o in ("delivered", "no_subscribers") else o for o in outcomes],
            "reason_code": pa.nulls(count, pa.int16()),
            "quota": pa.nulls(count, pa.string()),
            "subscriber": pa.nulls(count, pa.string()),
            "node": ["node-1"] * count,
        },
        schema=MESSAGE_SCHEMA,
    )


def build(store: LocalObjectStore, args: argparse.Namespace, now: datetime) -> None:
    rng = random.Random(30)
    hour_ms = 3_600_000
    current = now.replace(minute=0, second=0, microsecond=0)
    per_hour = args.rows // 24
    others = [f"tenant-{i}" for i in range(1, args.tenants)]
    for back in range(23, -1, -1):
        hour = current - timedelta(hours=back)
        start_ms = int(hour.timestamp() * 1000)
        span = hour_ms if back else max(1, int((now - current).total_seconds() * 1000))
        segments = args.segments if not back else 60  # closed hours: compacted below anyway
        tables = [rows("acme", per_hour, start_ms, span, rng)]
        tables += [rows(t, per_hour // 10, start_ms, span, rng) for t in others]
        table = pa.concat_tables(tables).sort_by("ts")
        step = -(-table.num_rows // segments)
        for n in range(segments):
            part = table.slice(n * step, step)
            if part.num_rows:
                key = live_segment_key(MESSAGES, start_ms, "node-1", back * 100_000 + n)
                store.put(key, encode(part))
            if not back and (n + 1) % OPEN_HOUR_SEGMENTS == 0 and n + 1 < segments:
                compact_hour(store, MESSAGES, hour)  # as journey_upkeep does every 5 minutes
        if back:
            compact_hour(store, MESSAGES, hour, merge=True)


def timed(fn, runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    times.sort()
    return statistics.median(times), times[max(0, round(0.99 * len(times)) - 1)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="the tenant's rows in a day")
    parser.add_argument("--tenants", type=int, default=10)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--segments", type=int, default=1800, help="live segments this hour")
    args = parser.parse_args(argv)
    # Late in an hour: the current hour holds most of its live segments.
    now = datetime.now(UTC).replace(minute=59, second=0, microsecond=0) - timedelta(hours=1)
    from tenants.journey.selectors import JourneyReader

    with tempfile.TemporaryDirectory(prefix="bench-journey-") as folder:
        store = LocalObjectStore(Path(folder))
        started = time.perf_counter()
        build(store, args, now)
        print(f"built in {time.perf_counter() - started:.0f} s", flush=True)
        reader = JourneyReader(store)
        window = {"start": now - timedelta(days=1), "end": now}
        files = journey_files(store, MESSAGES, "acme", window["start"], window["end"])
        print(
            f"acme: {args.rows:,} rows in a day among {args.tenants} tenants; {len(files)} "
            f"files to read ({sum(1 for _, shared in files if shared)} live segments)"
        )
        queries = {
            "newest 100": {},
            "topic sensors/+/temp": {"topic": "sensors/+/temp"},
            "outcome queue_full": {"outcome": "queue_full"},
            "client dev-7": {"client": "dev-7"},
            "a page deep (cursor)": {"cursor": None},
        }
        first = reader.messages("acme", limit=100, **window)
        queries["a page deep (cursor)"] = {"cursor": first.cursor}
        lines = []
        for name, params in queries.items():
            p50, p99 = timed(
                lambda p=params: reader.messages("acme", limit=100, **window, **p), args.runs
            )
            lines.append(f"  {name:<22} p50 {p50 * 1000:7.0f} ms   p99 {p99 * 1000:7.0f} ms")
            print(lines[-1], flush=True)
        paths = [str(store.root / key) for key, _ in files]

        def plain_duckdb() -> None:
            duckdb.sql(
                "SELECT * FROM read_parquet($paths, union_by_name = true) WHERE tenant = 'acme' "
                "AND regexp_full_match(topic, 'sensors/[^/]*/temp') ORDER BY ts DESC LIMIT 100",
                params={"paths": paths},
            ).fetchall()

        p50, p99 = timed(plain_duckdb, args.runs)
        print(f"  {'DuckDB, one SQL':<22} p50 {p50 * 1000:7.0f} ms   p99 {p99 * 1000:7.0f} ms")


if __name__ == "__main__":
    main()

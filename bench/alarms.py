"""Alarms (issue 46): the preview of an alarm over a day of one tenant's history beside DuckDB
computing the same raises with window functions over the same files, and the live job's state
for 10,000 keys — its size and what writing it (the checkpoint) and firing its timers cost.

    .venv/bin/python -m bench.alarms [--messages 1000000] [--runs 3] [--keys 10000] [--skip-state]

Preview: the archive of `bench.rule_preview` (tenant `bench`, `--messages` device JSON readings
over a day from 500 devices, three other tenants beside it; 22 hours compacted, 2 live). The
alarm: source `sensors/+/telemetry`, key `clientid`, raise `payload.temp > 95` held 60 s, clear
`NOT` it at once (`clear_for_seconds` 0), value `payload.temp` — the preview as the API runs it
(`common.alarms.preview`). DuckDB: the same raises as gaps and islands (per device, the hot
runs whose first hot reading is 60 s or more before the next reading that is not hot, or the
range's end), reading the files directly. Both must count the same raises.

State: a scratch tenant's definition on the embedded Postgres (migrated), the job's keeper
(`spark.rules.alarms.AlarmKeeper`) given one reading per key for `--keys` keys (every key
pending), then: a save (every state and transition written with the position, one transaction),
a tick over all keys that raises them all and the save of that, and the states' size in Postgres.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.rule_preview import DAY, generate, timed_count
from common.alarms.definition import AlarmSpec
from common.stores.object_store import LocalObjectStore

SPEC = AlarmSpec(
    source="sensors/+/telemetry",
    raise_condition="payload.temp > 95",
    raise_for=60.0,
    clear_for=0.0,
    value="payload.temp",
)


def time_preview(store: LocalObjectStore, runs: int) -> tuple[list[float], object]:
    from common.alarms.preview import preview

    end = DAY + timedelta(days=1)
    result = preview(store, "bench", SPEC, DAY, end, seconds=600)  # warm-up
    seconds = []
    for _ in range(runs):
        started = time.perf_counter()
        result = preview(store, "bench", SPEC, DAY, end, seconds=600)
        seconds.append(time.perf_counter() - started)
    return seconds, result


def time_duckdb(store: LocalObjectStore, runs: int) -> tuple[list[float], int]:
    import duckdb

    from common.archive.files import archive_files

    end_ms = int((DAY + timedelta(days=1)).timestamp() * 1000)
    files = archive_files(store, DAY, DAY + timedelta(days=1), "bench")
    listing = ", ".join(f"'{store.root / f.key}'" for f in files)
    query = f"""
        WITH readings AS (
          SELECT client_id, epoch_ms(ts) AS t,
                 coalesce(TRY_CAST(json_extract(decode(payload), '$.temp') AS DOUBLE) > 95,
                          false) AS hot
            FROM read_parquet([{listing}])
           WHERE tenant = 'bench' AND topic LIKE 'sensors/%/telemetry'),
        runs AS (
          SELECT *, sum(CASE WHEN hot THEN 0 ELSE 1 END)
                      OVER (PARTITION BY client_id ORDER BY t ROWS UNBOUNDED PRECEDING) AS run
            FROM readings),
        spans AS (
          SELECT client_id, run, min(t) FILTER (WHERE hot) AS first_hot, min(t) AS began
            FROM runs GROUP BY client_id, run),
        ended AS (
          SELECT first_hot, coalesce(lead(began) OVER (PARTITION BY client_id ORDER BY run),
                                     {end_ms}) AS cooled
            FROM spans)
        SELECT count(*) FROM ended WHERE first_hot IS NOT NULL AND cooled - first_hot >= 60000
    """
    return timed_count(duckdb.connect(), query, runs)


def figures(seconds: list[float]) -> str:
    return (
        f"p50 {statistics.median(seconds):.2f} s (min {min(seconds):.2f}, max {max(seconds):.2f})"
    )


def state(keys: int) -> None:
    """The keeper's checkpoint of `keys` states on the embedded Postgres."""
    from bench.archive import _django, manage

    manage("migrate", "--verbosity", "0")
    _django()
    import psycopg
    from django.db import connection

    from common.alarms.machine import Timing
    from common.contracts import tables
    from spark.rules.alarms import Alarm, AlarmKeeper, machine_json
    from spark.rules.feed import stream_id
    from spark.rules.results import ResultRow
    from tenants.alarms import services as alarm_services
    from tenants.tenant import services as tenant_services

    slug = f"bench-alarms-{os.getpid()}"
    tenant = tenant_services.tenant_create(slug)
    definition = alarm_services.alarm_definition_create(
        tenant=tenant, name="hot", source=SPEC.source, raise_condition=SPEC.raise_condition,
        raise_for_seconds=60, value=SPEC.value,
    )  # fmt: skip
    dsn = connection.settings_dict
    url = f"postgresql://{dsn['USER']}:{dsn['PASSWORD']}@{dsn['HOST']}:{dsn['PORT']}/{dsn['NAME']}"
    keeper = AlarmKeeper("bench", lambda a, b: stream_id(a) > stream_id(b))
    alarm = Alarm(definition.id, slug, "hot", SPEC, Timing(60.0, 0.0), 1)
    keeper.alarms = {alarm.id: alarm}
    now = time.time() - 120
    rows = [
        ResultRow(-alarm.id, slug, datetime.fromtimestamp(now + i / keys), 1, "passed",
                  json.dumps([{"alarm_key": f"sensor-{i}", "alarm_raised": True,
                               "alarm_cleared": False, "alarm_value": 97.5}]),
                  None, None, f"m{i}", f"sensors/sensor-{i}/telemetry", f"sensor-{i}",
                  f"{slug}/sensor-{i}")
        for i in range(keys)
    ]  # fmt: skip
    started = time.perf_counter()
    keeper.take(rows, f"{int(now * 1000)}-0")
    took = time.perf_counter() - started
    size = statistics.mean(len(machine_json(s)) for s in keeper.states.values())
    with psycopg.connect(url, autocommit=True) as conn:
        started = time.perf_counter()
        assert keeper.save(conn)
        first_save = time.perf_counter() - started
        started = time.perf_counter()
        raised = keeper.tick(now + 61)
        tick = time.perf_counter() - started
        started = time.perf_counter()
        assert keeper.save(conn)
        second_save = time.perf_counter() - started
        count, row_bytes = conn.execute(
            f"SELECT count(*), avg(pg_column_size(s.*)) FROM {tables.ALARM_STATE} s"
            " WHERE definition_id = %s",
            (alarm.id,),
        ).fetchone()
    print(
        f"state: {keys:,} keys taken in {took:.2f} s ({keys / took:,.0f} readings/s); "
        f"a key's machine {size:.0f} bytes as JSON; "
        f"checkpoint of {keys:,} pending states + transitions {first_save:.2f} s; "
        f"tick over {keys:,} keys {tick * 1000:.0f} ms ({raised:,} raised); "
        f"checkpoint of those {second_save:.2f} s; "
        f"{tables.ALARM_STATE}: {count:,} rows, {float(row_bytes or 0):,.0f} bytes a row"
    )
    tenant.delete()  # the scratch tenant, its alarm, states and transitions


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="of tenant bench")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--dir", default="/tmp/alarm-preview-bench")
    parser.add_argument("--skip-state", action="store_true")
    args = parser.parse_args(argv)
    store = LocalObjectStore(Path(args.dir))
    store.clear()
    generate(store, args.messages, 3)
    load = os.getloadavg()
    print(f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, cores {os.cpu_count()}, load {load[0]:.1f}")
    preview_s, result = time_preview(store, args.runs)
    print(
        f"preview of a day ({result.considered:,} messages of bench): {figures(preview_s)}; "
        f"raised {result.raised:,} for {result.keys_raised:,} keys, complete {result.complete}"
    )
    duck_s, count = time_duckdb(store, args.runs)
    print(f"duckdb, the same raises by window functions: {figures(duck_s)}; {count:,} raises")
    assert count == result.raised, "the preview and DuckDB disagree"
    print(f"preview / duckdb: {statistics.median(preview_s) / statistics.median(duck_s):.1f}x")
    if not args.skip_state:
        state(args.keys)
    print(f"load average at end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

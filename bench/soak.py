"""A soak: the broker as operators run it (`manage.py runbroker` on Postgres), under steady mixed
traffic for a long time, sampled for growth (issue 20, point 3).

    .venv/bin/python -m bench.soak --minutes 60 [--sample 10] [--out bench/soak.jsonl]

Traffic, all from one tenant made with the operator commands:
- publishers: `--publishers` clients publishing QoS 0 and QoS 1 at `--rate` msg/s each;
- persistent subscribers: `--subscribers` clients with a persistent session (3.1.1, clean
  session 0, QoS 1) that go away for a few seconds every minute or so and resume, so their
  queues fill in Postgres and drain;
- churn: a client connecting, subscribing, publishing once and leaving, every `--churn` seconds,
  alternately clean and persistent (a new persistent session each time, so the session purge and
  the per-tenant cap are exercised too).

Every `--sample` seconds: the broker's RSS (KiB), open file descriptors, Postgres connections of
the database (pg_stat_activity), and the messages delivered so far. Growth is judged after a
warm-up (the first fifth of the run): the mean of the last fifth over the mean of the second
fifth, for RSS, descriptors and database connections (the target: ≤ 5 %).

`--snapshots DIR --snapshot-every MIN`: run the broker with tracemalloc on (`--trace-frames`
frames) and ask it (SIGUSR1, `MEMORY_DUMP_DIR`) for a snapshot and a count of live objects by type
every MIN minutes; at the end, print what grew between consecutive dumps and from the first
dump after warm-up to the last (allocation sites by traced bytes, object types by count). Traced
runs are slower: use them to find a leak, not for the RSS figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import aiomqtt
import psycopg

from bench.archive import PASSWORD, cleanup, manage, start_runbroker


def database_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    from common.runtime import embedded

    return embedded.postgres_url()


def seed() -> tuple[str, str]:
    tenant = f"soak-{uuid.uuid4().hex[:6]}"
    manage("migrate", "--verbosity", "0")
    manage("create_tenant", tenant)
    device = manage("create_device", tenant, "d", "--password", PASSWORD, "--client-ids", "any")
    manage(
        "set_quota",
        tenant,
        "max_connections=10000",
        "max_publish_rate=100000",
        "max_inbound_bytes_rate=200000000",
        "max_outbound_bytes_rate=200000000",
        "max_queued_messages=20000",
        "max_persistent_sessions=100000",
        "max_session_expiry=120",  # churned persistent sessions expire: the purge is in the soak
    )
    return tenant, device["username"]


class Counters:
    def __init__(self) -> None:
        self.published = 0
        self.delivered = 0
        self.churned = 0
        self.errors = 0


async def publisher(port: int, user: str, index: int, rate: float, stop, counters) -> None:
    while not stop.is_set():
        try:
            async with aiomqtt.Client(
                "127.0.0.1", port, username=user, password=PASSWORD, identifier=f"pub-{index}"
            ) as client:
                while not stop.is_set():
                    qos = 1 if counters.published % 2 else 0
                    payload = os.urandom(random.choice((16, 200, 1200)))
                    await client.publish(f"soak/{index % 8}/x", payload, qos=qos)
                    counters.published += 1
                    await asyncio.sleep(1 / rate)
        except aiomqtt.MqttError:
            counters.errors += 1
            await asyncio.sleep(1)


async def subscriber(port: int, user: str, index: int, stop, counters) -> None:
    """A persistent session that leaves and resumes now and then."""
    while not stop.is_set():
        try:
            async with aiomqtt.Client(
                "127.0.0.1",
                port,
                username=user,
                password=PASSWORD,
                identifier=f"sub-{index}",
                clean_session=False,
                protocol=aiomqtt.ProtocolVersion.V311,
            ) as client:
                await client.subscribe(f"soak/{index % 8}/#", qos=1)
                online_until = time.monotonic() + random.uniform(30, 90)
                async for _message in client.messages:
                    counters.delivered += 1
                    if time.monotonic() > online_until or stop.is_set():
                        break
            await asyncio.sleep(random.uniform(2, 6))  # offline: the queue fills
        except aiomqtt.MqttError:
            counters.errors += 1
            await asyncio.sleep(1)


async def churn(port: int, user: str, every: float, stop, counters) -> None:
    n = 0
    while not stop.is_set():
        n += 1
        try:
            async with aiomqtt.Client(
                "127.0.0.1",
                port,
                username=user,
                password=PASSWORD,
                identifier=f"churn-{n}",
                clean_session=n % 2 == 0,
                protocol=aiomqtt.ProtocolVersion.V311,
                timeout=10,
            ) as client:
                await client.subscribe(f"churn/{n % 50}", qos=1)
                await client.publish(f"churn/{n % 50}", b"x", qos=1)
            counters.churned += 1
        except aiomqtt.MqttError:
            counters.errors += 1
        await asyncio.sleep(every)


def sample(pid: int, dsn: str) -> dict:
    status = Path(f"/proc/{pid}/status").read_text()
    rss = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:"))
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        ).fetchone()
    return {"rss_kib": rss, "fds": fds, "db_connections": row[0]}


def growth(samples: list[dict], key: str) -> float:
    fifth = max(1, len(samples) // 5)
    early = samples[fifth : 2 * fifth] or samples[:1]
    late = samples[-fifth:]
    base = statistics.mean(s[key] for s in early)
    return statistics.mean(s[key] for s in late) / base - 1 if base else 0.0


def memory_report(directory: Path, top: int = 12) -> list[str]:
    """What grew between the broker's memory dumps (tracemalloc snapshots, object counts)."""
    import tracemalloc

    lines: list[str] = []
    dumps = sorted(directory.glob("types-*.json"))
    stamps = [p.stem.split("-", 1)[1] for p in dumps]
    pairs = list(zip(stamps, stamps[1:], strict=False))
    if len(stamps) > 3:
        pairs.append((stamps[1], stamps[-1]))  # first after warm-up to last
    for before, after in pairs:
        lines.append(f"== {before} -> {after} ({int(after) - int(before)} s)")
        old = json.loads((directory / f"types-{before}.json").read_text())
        new = json.loads((directory / f"types-{after}.json").read_text())
        grown = sorted(((new.get(k, 0) - old.get(k, 0), k) for k in new), reverse=True)[:top]
        lines.append("objects: " + ", ".join(f"{k} {d:+d}" for d, k in grown if d))
        heaps = [directory / f"heap-{stamp}.json" for stamp in (before, after)]
        if all(p.exists() for p in heaps):
            old_heap, new_heap = (json.loads(p.read_text()) for p in heaps)
            lines.append(
                "native heap: "
                + ", ".join(
                    f"{k} {v / 2**20:.1f} MiB ({(v - old_heap.get(k, 0)) / 2**20:+.1f})"
                    for k, v in new_heap.items()
                )
            )
        a, b = directory / f"snapshot-{before}.pickle", directory / f"snapshot-{after}.pickle"
        if a.exists() and b.exists():
            first = tracemalloc.Snapshot.load(str(a))
            second = tracemalloc.Snapshot.load(str(b))
            total = sum(s.size for s in second.statistics("filename")) - sum(
                s.size for s in first.statistics("filename")
            )
            lines.append(f"traced bytes {total:+,d}")
            for stat in second.compare_to(first, "lineno")[:top]:
                lines.append(f"  {stat}")
    return lines


async def soak(args: argparse.Namespace) -> dict:
    tenant, user = seed()
    objects = Path(tempfile.mkdtemp(prefix="soak-objects-"))
    dumps = Path(args.snapshots) if args.snapshots else None
    if dumps is not None:
        dumps.mkdir(parents=True, exist_ok=True)
        os.environ["MEMORY_DUMP_DIR"] = str(dumps.resolve())
        if args.trace_frames:  # 0: object counts and the native heap only, untraced
            os.environ["PYTHONTRACEMALLOC"] = str(args.trace_frames)
    broker = start_runbroker(archive=True, objects=objects)
    next_dump = time.monotonic() + 60 * args.snapshot_every
    dsn = database_url()
    counters = Counters()
    stop = asyncio.Event()
    tasks = [
        *(
            asyncio.create_task(publisher(broker.port, user, i, args.rate, stop, counters))
            for i in range(args.publishers)
        ),
        *(
            asyncio.create_task(subscriber(broker.port, user, i, stop, counters))
            for i in range(args.subscribers)
        ),
        asyncio.create_task(churn(broker.port, user, args.churn, stop, counters)),
    ]
    samples: list[dict] = []
    started = time.monotonic()
    out = open(args.out, "w") if args.out else None
    try:
        while time.monotonic() - started < args.minutes * 60:
            await asyncio.sleep(args.sample)
            if broker.process.poll() is not None:
                raise RuntimeError("the broker died during the soak")
            point = {
                "t": round(time.monotonic() - started),
                **sample(broker.process.pid, dsn),
                "published": counters.published,
                "delivered": counters.delivered,
                "churned": counters.churned,
                "client_errors": counters.errors,
                "cpu_s": round(broker.cpu_seconds(), 1),
                "load1": round(os.getloadavg()[0], 2),
            }
            samples.append(point)
            if dumps is not None and time.monotonic() >= next_dump:
                os.kill(broker.process.pid, signal.SIGUSR1)
                next_dump += 60 * args.snapshot_every
            if out:
                out.write(json.dumps(point) + "\n")
                out.flush()
            print(json.dumps(point), flush=True)
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        broker.stop()
        await asyncio.to_thread(cleanup, [tenant])  # Django's ORM is synchronous
        if out:
            out.close()
    if dumps is not None:
        print("\n".join(memory_report(dumps)), flush=True)
    return {
        "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()],
        "minutes": round((time.monotonic() - started) / 60, 1),
        "samples": len(samples),
        "published": counters.published,
        "delivered": counters.delivered,
        "churned_connections": counters.churned,
        "client_errors": counters.errors,
        "rss_kib_first_last": [samples[0]["rss_kib"], samples[-1]["rss_kib"]],
        "rss_growth": round(growth(samples, "rss_kib"), 4),
        "fds_first_last": [samples[0]["fds"], samples[-1]["fds"]],
        "fds_growth": round(growth(samples, "fds"), 4),
        "db_connections_first_last": [
            samples[0]["db_connections"],
            samples[-1]["db_connections"],
        ],
        "db_connections_growth": round(growth(samples, "db_connections"), 4),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--sample", type=float, default=10)
    parser.add_argument("--publishers", type=int, default=10)
    parser.add_argument("--subscribers", type=int, default=16)
    parser.add_argument("--rate", type=float, default=20, help="msg/s per publisher")
    parser.add_argument("--churn", type=float, default=0.05, help="seconds between churn clients")
    parser.add_argument("--out", help="also write the samples here (JSON lines)")
    parser.add_argument("--snapshots", help="trace memory; write the broker's dumps here")
    parser.add_argument("--snapshot-every", type=float, default=2, help="minutes between dumps")
    parser.add_argument("--trace-frames", type=int, default=1, help="tracemalloc frames (0: off)")
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(soak(args)), indent=1))


if __name__ == "__main__":
    main()

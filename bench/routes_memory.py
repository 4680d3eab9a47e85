"""Route table memory per subscription (issue 17, Benchmarks): what 1,000,000 subscriptions cost
in Redis and in the broker processes, with simulated subscribers (no sockets).

The same path as a live node, without the network: each subscription goes into a broker
`Router` (the node's own trie, whose `on_route` reports a filter's first subscriber), the route
keys it reports are written to a throwaway `redis-server` the way a node rewrites its set
(`SADD` in chunks of `ROUTE_CHUNK` into `Keys.routes(node)`), and another node's replica
(`RouteTable.replace`) loads that set. Measured:

- Redis: `used_memory` after minus before (the route set, its version key);
- the subscribing node's router (its trie and `Subscriber`s: what it holds whatever the
  cluster), and another node's replica of the routes, by tracemalloc (Python allocations).

Two shapes, both over many tenants with realistic filters sharing prefixes
(`{site}/{building}/{floor}/{device}/telemetry/#`, `devices/{id}/cmd`, `+/{id}/status`, ...):
`distinct` (every subscription a different (tenant, filter): one route each) and `duplicate`
(100 subscribers per filter: a route stands for a filter, not a subscriber).

Usage: `python -m bench.routes_memory [--subscriptions 1000000] [--tenants 1000] [--write]`.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from common.runtime import embedded
from data_plane.broker.router import Router, Subscriber
from data_plane.cluster.keys import Keys
from data_plane.cluster.own_routes import ROUTE_CHUNK
from data_plane.cluster.routes import RouteTable, route_key

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "RESULTS.md"
DUPLICATES = 100  # subscribers per filter in the `duplicate` shape


class FakeSession:
    """A subscriber's session, as far as the router looks at it."""

    __slots__ = ("client_id", "connected")

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.connected = True


def filters(count: int, tenants: int, seed: int = 17) -> Iterator[tuple[str, str]]:
    """`count` distinct (tenant, filter) pairs, shaped as fleets subscribe: deep hierarchies
    sharing their upper levels, per-device command topics, wildcards in the middle."""
    rng = random.Random(seed)
    shapes = (
        "site{a}/building{b}/floor{c}/dev{n}/telemetry/#",
        "devices/{n}/cmd",
        "+/dev{n}/status",
        "site{a}/building{b}/+/dev{n}/alarms",
        "fleet/{a}/vehicles/{n}/gps",
        "$share/workers/site{a}/jobs/{n}",
    )
    for i in range(count):
        tenant = f"tenant-{i % tenants:05d}"
        shape = shapes[i % len(shapes)]
        n = i // tenants
        yield (
            tenant,
            shape.format(a=rng.randrange(20), b=rng.randrange(10), c=rng.randrange(8), n=n),
        )


@dataclass
class Figures:
    shape: str
    subscriptions: int
    routes: int
    redis_bytes: int
    router_bytes: int
    replica_bytes: int
    seconds: float


def start_redis(folder: Path) -> tuple[subprocess.Popen, int]:
    port = embedded.free_port()
    process = subprocess.Popen(
        [shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1"]
        + ["--save", "", "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not embedded.port_open(port):
        if time.monotonic() > deadline:
            raise RuntimeError("redis-server did not start")
        time.sleep(0.05)
    return process, port


def measure(shape: str, subscriptions: int, tenants: int, port: int) -> Figures:
    started = time.monotonic()
    bus = redis.Redis(port=port)
    bus.flushall()
    keys = Keys("bench")
    node = "node-a"
    routes: list[str] = []

    def on_route(tenant: str, topic_filter: str, group: str | None, added: bool) -> None:
        if added:
            routes.append(route_key(tenant, topic_filter, group))

    distinct = subscriptions if shape == "distinct" else subscriptions // DUPLICATES
    copies = 1 if shape == "distinct" else DUPLICATES
    # The sessions stand for the clients' own state, not the routes': made before measuring.
    sessions = [FakeSession(f"c{i}") for i in range(distinct * copies)]
    wanted = list(filters(distinct, tenants))
    gc.collect()
    tracemalloc.start()
    router = Router(on_route)
    index = 0
    for tenant, topic_filter in wanted:
        group = None
        if topic_filter.startswith("$share/"):
            _, group, topic_filter = topic_filter.split("/", 2)
        trie = router.for_tenant(tenant)
        for _ in range(copies):
            trie.subscribe(topic_filter, Subscriber(sessions[index], 1), group)
            index += 1
    router_total = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    # The route keys `on_route` made here go to Redis and are dropped by a live node: not kept.
    router_bytes = router_total - sum(sys.getsizeof(k) for k in routes) - 8 * len(routes)
    del wanted
    before = int(bus.info("memory")["used_memory"])
    pipe = bus.pipeline(transaction=True)
    pipe.delete(keys.routes(node))
    for start in range(0, len(routes), ROUTE_CHUNK):
        pipe.sadd(keys.routes(node), *routes[start : start + ROUTE_CHUNK])
    pipe.set(keys.version(node), 1)
    pipe.execute()
    redis_bytes = int(bus.info("memory")["used_memory"]) - before
    members = {m.decode() for m in bus.smembers(keys.routes(node))}
    assert len(members) == len(routes), (len(members), len(routes))
    gc.collect()
    tracemalloc.start()
    table = RouteTable()
    table.replace(node, 1, members)
    replica_total = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    # The set of strings handed in is the caller's: the replica keeps references to them
    # (RemoteNode.routes), so their bytes count once — in `members`, measured apart.
    tracemalloc.start()
    again = {m.decode() for m in bus.smembers(keys.routes(node))}
    strings = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del again
    replica_bytes = replica_total + strings
    del table, router, sessions, members
    gc.collect()
    bus.flushall()
    bus.close()
    return Figures(
        shape,
        subscriptions,
        len(routes),
        redis_bytes,
        router_bytes,
        replica_bytes,
        time.monotonic() - started,
    )


def table(rows: list[Figures]) -> str:
    lines = [
        "| shape | subscriptions | routes (distinct (tenant, filter)) | Redis bytes / subscription "
        "| Redis bytes / route | node's router bytes / subscription | another node's replica "
        "bytes / subscription | replica bytes / route |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.shape} | {r.subscriptions:,} | {r.routes:,} "
            f"| {r.redis_bytes / r.subscriptions:.1f} | {r.redis_bytes / r.routes:.1f} "
            f"| {r.router_bytes / r.subscriptions:.1f} "
            f"| {r.replica_bytes / r.subscriptions:.1f} | {r.replica_bytes / r.routes:.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subscriptions", type=int, default=1_000_000)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--write", action="store_true", help="append to bench/RESULTS.md")
    args = parser.parse_args()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as folder:
        process, port = start_redis(Path(folder))
        try:
            rows = [
                measure(shape, args.subscriptions, args.tenants, port)
                for shape in ("distinct", "duplicate")
            ]
            version = redis.Redis(port=port).info("server")["redis_version"]
        finally:
            process.kill()
            process.wait(5)
    load_after = os.getloadavg()
    text = table(rows)
    print(text)
    for row in rows:
        print(f"{row.shape}: {row.seconds:.1f} s")
    if args.write:
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        command = (
            f"python -m bench.routes_memory --subscriptions {args.subscriptions} "
            f"--tenants {args.tenants}"
        )
        with RESULTS.open("a") as out:
            out.write(
                f"\n## Cluster route table memory per subscription (issue 17, {stamp})\n\n"
                f"`{command}` (Redis {version}; load average {load[0]:.1f} → "
                f"{load_after[0]:.1f}).\n\n{text}\n"
            )


if __name__ == "__main__":
    main()

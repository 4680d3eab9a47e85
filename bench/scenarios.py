"""Benchmark scenarios. Each runs against one started broker and returns its figures:
delivered msg/s, latency p50/p99 (ms), loss, broker CPU-seconds per 1,000 delivered, RSS."""

from __future__ import annotations

import asyncio
import time
from dataclasses import asdict, dataclass, field

from bench.brokers import PASSWORD, USERNAME, RunningBroker
from bench.loadgen import (
    PublishTemplate,
    Stats,
    close_all,
    connect_many,
    publish_at_rate,
    publish_flat_out,
)


@dataclass
class Result:
    scenario: str
    broker: str
    delivered_per_s: float = 0.0
    p50_ms: float = float("nan")
    p99_ms: float = float("nan")
    sent: int = 0
    received: int = 0
    loss: int = 0
    cpu_per_1000: float = float("nan")
    rss_kib_per_conn: float = float("nan")
    connects_per_s: float = float("nan")
    note: str = ""
    # CPU µs per delivered message by broker thread (pairs only; `RunningBroker.thread_cpu_seconds`)
    cpu_us_by_thread: dict[str, float] = field(default_factory=dict)

    def row(self) -> dict:
        return asdict(self)


async def drain(stats: Stats, expected: int, timeout: float, quiet: float = 2.0) -> float:
    """Wait until `expected` messages arrived, or none arrived for `quiet` seconds (QoS 0 may
    lose some), or `timeout` seconds; returns when the last one arrived (`perf_counter`, to
    50 ms), the end of the run to divide by: the wait for messages that never come is not
    delivery time (it had made a lossy QoS 0 fan-in look 10x slower than it was)."""
    now = time.perf_counter()
    deadline, last, seen = now + timeout, now, stats.received
    while stats.received < expected and now < deadline:
        await asyncio.sleep(0.05)
        now = time.perf_counter()
        if stats.received != seen:
            seen, last = stats.received, now
        elif now - last >= quiet:
            break
    return now if stats.received >= expected else last


async def pairs(
    broker: RunningBroker,
    n: int,
    qos: int,
    seconds: float,
    creds: tuple[str, str] | list[tuple[str, str]] = (USERNAME, PASSWORD),
    bodies: list[bytes] | None = None,
) -> Result:
    """n publisher/subscriber pairs, each on its own topic. `creds`: one login for every client,
    or a list: pair i's two clients log in as `creds[i % len(creds)]` (pairs across tenants).
    `bodies`: the payloads' contents after the timestamp (`loadgen.json_bodies`), each publisher
    starting at its own place; else `x`s."""
    logins = creds if isinstance(creds, list) else [creds]
    stats = Stats(sample_every=10)
    subs = await connect_many(n, "127.0.0.1", broker.port, stats, "sub", None, None, logins=logins)
    for index, sub in enumerate(subs):
        await sub.subscribe(f"bench/pairs/{index}", qos)
    pubs = await connect_many(
        n, "127.0.0.1", broker.port, Stats(), "pub", None, None, logins=logins
    )
    cpu_before, threads_before = broker.cpu_seconds(), broker.thread_cpu_seconds()
    started = time.perf_counter()
    deadline = started + seconds
    await asyncio.gather(
        *(
            publish_flat_out(
                pub,
                PublishTemplate(f"bench/pairs/{i}", 1024, qos, bodies, start=i * 997),
                deadline,
                stats,
                10,
            )
            for i, pub in enumerate(pubs)
        )
    )
    elapsed = await drain(stats, stats.sent, 10) - started  # QoS 0 in flight counts too
    cpu = broker.cpu_seconds() - cpu_before
    threads = {
        name: (spent - threads_before.get(name, 0.0)) / max(stats.received, 1) * 1e6
        for name, spent in broker.thread_cpu_seconds().items()
    }
    close_all(subs + pubs)
    result = Result(
        f"pairs n={n} qos={qos}",
        broker.name,
        stats.received / elapsed,
        stats.percentile(0.5),
        stats.percentile(0.99),
        stats.sent,
        stats.received,
        stats.sent - stats.received,
        cpu / max(stats.received, 1) * 1000,
    )
    result.cpu_us_by_thread = {name: us for name, us in threads.items() if us >= 0.005}
    return result


async def latency(broker: RunningBroker, n: int, rate: int, seconds: float) -> Result:
    """Fixed total rate over n pairs at QoS 0; p50/p99 of publish-to-delivery."""
    stats = Stats()
    creds = (USERNAME, PASSWORD)
    subs = await connect_many(n, "127.0.0.1", broker.port, stats, "lsub", *creds)
    for index, sub in enumerate(subs):
        await sub.subscribe(f"bench/lat/{index}", 0)
    pubs = await connect_many(n, "127.0.0.1", broker.port, Stats(), "lpub", *creds)
    templates = [PublishTemplate(f"bench/lat/{i}", 1024, 0) for i in range(n)]
    cpu_before = broker.cpu_seconds()
    await publish_at_rate(pubs, templates, rate, seconds, stats)
    await drain(stats, stats.sent, 2)
    cpu = broker.cpu_seconds() - cpu_before
    close_all(subs + pubs)
    return Result(
        f"latency n={n} {rate}/s",
        broker.name,
        stats.received / seconds,
        stats.percentile(0.5),
        stats.percentile(0.99),
        stats.sent,
        stats.received,
        stats.sent - stats.received,
        cpu / max(stats.received, 1) * 1000,
    )


async def fanout(
    broker: RunningBroker, n: int, qos: int, seconds: float, settle: float = 0.0
) -> Result:
    """1 publisher → n subscribers. `settle`: seconds between the subscriptions and the first
    publish (a cluster spreads a node's new routes to the others asynchronously, as EMQX does)."""
    stats = Stats(sample_every=50)
    creds = (USERNAME, PASSWORD)
    subs = await connect_many(n, "127.0.0.1", broker.port, stats, "fsub", *creds)
    for sub in subs:
        await sub.subscribe("bench/fanout", qos)
    await asyncio.sleep(settle)
    (pub,) = await connect_many(1, "127.0.0.1", broker.port, Stats(), "fpub", *creds)
    template = PublishTemplate("bench/fanout", 1024, qos)
    cpu_before = broker.cpu_seconds()
    started = time.perf_counter()
    published = 0
    while time.perf_counter() - started < seconds:
        # Keep the broker's outbound queues from growing without bound: 50 messages in flight.
        if published - stats.received / n < 50:
            pub.transport.write(template.packet(published % 65535 + 1))
            published += 1
        else:
            await asyncio.sleep(0.001)
    elapsed = await drain(stats, published * n, 10) - started
    cpu = broker.cpu_seconds() - cpu_before
    close_all(subs + [pub])
    return Result(
        f"fanout 1->{n} qos={qos}",
        broker.name,
        stats.received / elapsed,
        stats.percentile(0.5),
        stats.percentile(0.99),
        published * n,
        stats.received,
        published * n - stats.received,
        cpu / max(stats.received, 1) * 1000,
    )


async def fanin(
    broker: RunningBroker,
    n: int,
    qos: int,
    seconds: float,
    shared: int = 0,
    settle: float = 0.0,
) -> Result:
    """n publishers → 1 subscriber (or a shared group of `shared`); `settle` as in fanout."""
    stats = Stats(sample_every=10)
    creds = (USERNAME, PASSWORD)
    topic = "$share/g/bench/fanin/#" if shared else "bench/fanin/#"
    subs = await connect_many(max(1, shared), "127.0.0.1", broker.port, stats, "isub", *creds)
    for sub in subs:
        await sub.subscribe(topic, qos)
    await asyncio.sleep(settle)
    pubs = await connect_many(n, "127.0.0.1", broker.port, Stats(), "ipub", *creds)
    cpu_before = broker.cpu_seconds()
    started = time.perf_counter()
    deadline = started + seconds
    await asyncio.gather(
        *(
            publish_flat_out(
                pub, PublishTemplate(f"bench/fanin/{i}", 1024, qos), deadline, stats, 2
            )
            for i, pub in enumerate(pubs)
        )
    )
    elapsed = await drain(stats, stats.sent, 15) - started
    cpu = broker.cpu_seconds() - cpu_before
    close_all(subs + pubs)
    name = f"fanin {n}->{'$share x' + str(shared) if shared else '1'} qos={qos}"
    return Result(
        name,
        broker.name,
        stats.received / elapsed,
        stats.percentile(0.5),
        stats.percentile(0.99),
        stats.sent,
        stats.received,
        stats.sent - stats.received,
        cpu / max(stats.received, 1) * 1000,
    )


async def conns(broker: RunningBroker, n: int) -> Result:
    stats = Stats()
    rss_before = broker.rss_kib()
    started = time.perf_counter()
    clients = await connect_many(
        n, "127.0.0.1", broker.port, stats, "idle", USERNAME, PASSWORD, parallel=500
    )
    elapsed = time.perf_counter() - started
    await asyncio.sleep(1)
    rss_after = broker.rss_kib()
    close_all(clients)
    return Result(
        f"conns n={n}",
        broker.name,
        rss_kib_per_conn=(rss_after - rss_before) / n,
        connects_per_s=n / elapsed,
    )


async def slowsub(broker: RunningBroker, n: int, seconds: float) -> Result:
    """n QoS 0 pairs flat out while one extra subscriber to everything stops reading: the
    broker's RSS must stay bounded by its queue limit and the pairs keep their throughput."""
    from bench.loadgen import connect

    stats = Stats(sample_every=10)
    creds = (USERNAME, PASSWORD)
    slow = await connect("127.0.0.1", broker.port, Stats(), "slow", *creds)
    await slow.subscribe("bench/slow/#", 0)
    slow.transport.pause_reading()  # never reads again
    subs = await connect_many(n, "127.0.0.1", broker.port, stats, "ssub", *creds)
    for index, sub in enumerate(subs):
        await sub.subscribe(f"bench/slow/{index}", 0)
    pubs = await connect_many(n, "127.0.0.1", broker.port, Stats(), "spub", *creds)
    rss_before = broker.rss_kib()
    cpu_before = broker.cpu_seconds()
    started = time.perf_counter()
    deadline = started + seconds
    await asyncio.gather(
        *(
            publish_flat_out(pub, PublishTemplate(f"bench/slow/{i}", 1024, 0), deadline, stats, 10)
            for i, pub in enumerate(pubs)
        )
    )
    elapsed = await drain(stats, stats.sent, 2) - started
    growth_mib = (broker.rss_kib() - rss_before) / 1024
    cpu = broker.cpu_seconds() - cpu_before
    close_all(subs + pubs + [slow])
    return Result(
        f"slowsub n={n}",
        broker.name,
        stats.received / elapsed,
        stats.percentile(0.5),
        stats.percentile(0.99),
        stats.sent,
        stats.received,
        stats.sent - stats.received,
        cpu / max(stats.received, 1) * 1000,
        note=f"broker RSS grew {growth_mib:.0f} MiB (queue limit 5000 msgs)",
    )

"""The rate leases (data_plane.cluster.leases) on a real Redis, three nodes in one process: the
documented bound (at most rate × T + burst in any window of T seconds) and the rate itself
under a sustained excess, without brokers or sockets in the way."""

from __future__ import annotations

import asyncio
import time
import uuid
from types import SimpleNamespace

import redis.asyncio as aioredis

from data_plane.broker.hooks import Hooks
from data_plane.cluster.bus import Bus
from data_plane.cluster.keys import Keys
from data_plane.cluster.limits import ClusterLimits

RATE = 400


def fake_node(url: str, name: str, node: str, alive: dict) -> tuple[Bus, SimpleNamespace]:
    """What ClusterLimits is given: the bus (keys, id, Redis with the socket timeouts a node's
    client has: a call Redis does not answer fails, it never hangs; heartbeat), and the peers
    (the live others)."""
    redis = aioredis.Redis.from_url(url, socket_timeout=1.0, socket_connect_timeout=1.0)
    return Bus(node, Keys(name), redis, redis, 1.0), SimpleNamespace(alive=alive, dying=set())


async def run_nodes(url: str, seconds: float, demand_per_node: float) -> tuple[list, float]:
    """Three nodes' publishers, each offered `demand_per_node` msg/s; the admission times."""
    name = f"leases-{uuid.uuid4().hex[:6]}"
    ids = ["n0", "n1", "n2"]
    nodes = []
    for node_id in ids:
        alive = {other: {} for other in ids if other != node_id}
        limits = ClusterLimits(*fake_node(url, name, node_id, alive))
        await limits.start(SimpleNamespace(hooks=Hooks(), metric_sources=[]))
        nodes.append(limits)
    admitted: list[float] = []
    quota = {"max_publish_rate": RATE}

    async def publisher(limits: ClusterLimits) -> None:
        rates = limits.rates_for("acme", quota)
        began = time.monotonic()
        sent = 0
        while time.monotonic() - began < seconds:
            if rates.admit(10) == 0.0:
                admitted.append(time.monotonic())
            sent += 1
            await asyncio.sleep(max(0.0, began + sent / demand_per_node - time.monotonic()))

    started = time.monotonic()
    await asyncio.gather(*(publisher(limits) for limits in nodes))
    for limits in nodes:
        await limits.stop()
        await limits.bus.redis.aclose()
    return admitted, started


def test_three_nodes_admit_the_rate_and_never_more_than_rate_times_t_plus_burst(redis_url):
    seconds = 5.0
    admitted, started = asyncio.run(run_nodes(redis_url, seconds, demand_per_node=RATE))
    # The bound, over every window starting at the beginning (the bucket starts full).
    for end in (1.0, 2.0, 3.0, 4.0, seconds):
        inside = sum(1 for t in admitted if t - started <= end)
        # + the first credits (leases.rates_for: a node new to the tenant starts with its share
        # of a lease, 0.25 s of the rate over the three nodes, before its first lease counts it)
        assert inside <= RATE * end + RATE + RATE * 0.25, (end, inside)
    # Under 3 × the rate, once the first second's burst is spent: the rate, within 5 %.
    window = [t for t in admitted if 1.5 <= t - started < seconds - 0.2]
    measured = len(window) / (seconds - 0.2 - 1.5)
    assert abs(measured - RATE) <= 0.05 * RATE, measured


def test_below_the_rate_nothing_is_refused(redis_url):
    """Three nodes at a quarter of the rate each (75 % of it together): all admitted, after the
    first ticks' leases."""
    seconds = 3.0
    admitted, started = asyncio.run(run_nodes(redis_url, seconds, demand_per_node=RATE / 4))
    offered = 3 * RATE / 4 * seconds
    assert len(admitted) >= 0.98 * offered, (len(admitted), offered)

"""A tenant's limits across the cluster (issue 17, point 4): connections counted exactly, rates
shared through leases, `$SYS` figures summed over the nodes.

`ClusterLimits` is what the node (`Cluster.limits`) holds: a thin composition of the rooms that
do the work, each with its own state and its own part of Redis under `Keys.prefix`:

- `connection_counts`: max connections, exact — one Redis script admits a CONNECT over the live
  nodes' counts (`{prefix}:conns:{tenant}`); this node's marker (`{prefix}:alive:{node}`) says
  which counts, and which leases, are live;
- `leases`: the rates as token buckets in Redis (`{prefix}:bucket:{tenant}:{kind}`) that each
  node leases from once a tick, never per message; the bound is one broker's, rate × T + burst;
- `leased_buckets`: the tokens this node holds, spent by the broker's hot path without Redis;
- `sys_figures`: the tenants' `$SYS` figures summed over the nodes (`{prefix}:sys:{node}`).

Here: their life (the hooks, the counts' sender, leaving at once rather than at the marker's
TTL), the tick they all run on (every `TICK`: the marker, the sweep of uncounted slots, the
leases due, the figures every `SYS_EVERY`; Redis unreachable, the buckets refill locally), and
their `/metrics`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from redis.exceptions import RedisError

from common.runtime.cancellation import stop_all
from data_plane.broker.connection import MQTTConnection
from data_plane.cluster.bus import Bus, Peers
from data_plane.cluster.connection_counts import ConnectionCounts
from data_plane.cluster.leased_buckets import TICK, ClusterRates
from data_plane.cluster.leases import RateLeases
from data_plane.cluster.sys_figures import SysFigures

if TYPE_CHECKING:
    from data_plane.broker.broker import Broker

log = logging.getLogger("data_plane.cluster")


class ClusterLimits:
    """The tenants' limits across the nodes, as this node keeps them (see the docstring)."""

    def __init__(self, bus: Bus, peers: Peers) -> None:
        self.bus = bus
        self.counts = ConnectionCounts(bus)
        self.leases = RateLeases(bus, peers, self.counts.marker_prefix)
        self.sys_figures = SysFigures(bus, peers)
        self.tasks: list[asyncio.Task[None]] = []
        self.last_tick = time.monotonic()

    # -- what the node asks -----------------------------------------------------------------

    async def admit(self, conn: MQTTConnection, tenant: str, limit: int) -> int:
        """0 when `conn` may come in under the tenant's `limit` across the cluster, else the
        CONNACK reason code (see `connection_counts`)."""
        return await self.counts.admit(conn, tenant, limit)

    def rates_for(self, tenant: str, quota: dict[str, int]) -> ClusterRates:
        """The tenant's leased buckets, as `Shares.local_rates` (see `leases`)."""
        return self.leases.rates_for(tenant, quota)

    def figures(self, tenant: str, local: dict[str, object]) -> dict[str, object]:
        """The tenant's `$SYS` figures over the live nodes (see `sys_figures`)."""
        return self.sys_figures.figures(tenant, local)

    # -- life -----------------------------------------------------------------------------

    async def start(self, broker: Broker) -> None:
        """Hook into the broker, set our marker, start the tick and the counts' sender."""
        self.counts.attach(broker)
        broker.metric_sources.append(self.metrics)
        try:  # our marker before any count of ours: else another node's ADMIT drops our field
            await self.counts.mark()
        except (RedisError, OSError) as exc:
            log.warning("limits: bus not reachable yet (%s)", exc)
        loop = asyncio.get_running_loop()
        self.tasks += [loop.create_task(self._tick_forever()), loop.create_task(self.counts.run())]

    async def stop(self) -> None:
        """Stop the loops and leave: our counts and leases need not wait for the marker to
        expire."""
        await stop_all([*self.tasks, *self.leases.tasks], "cluster limits")
        try:
            node = self.bus.node_id
            pipe = self.bus.redis.pipeline(transaction=False)
            pipe.delete(self.counts.marker, self.sys_figures.key(node))
            self.counts.leave(pipe)
            self.leases.leave(pipe)
            await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("limits not released cleanly: %s", exc)

    # -- every tick -------------------------------------------------------------------------

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            try:
                await self._tick()
            except (RedisError, OSError) as exc:
                log.debug("limits tick failed (%s): refilling locally", exc)
                now = time.monotonic()
                self.leases.refill_locally(now - self.last_tick)
                self.last_tick = now
            except Exception:  # a bug must not stop the marker, the sweep, the leases
                log.exception("limits tick failed")

    async def _tick(self) -> None:
        now = time.monotonic()
        await self.counts.mark()
        self.counts.sweep()
        await self.leases.top_up(now)
        self.last_tick = now
        await self.sys_figures.exchange_every(now)

    # -- /metrics ---------------------------------------------------------------------------

    def metrics(self) -> Iterator[Metric]:
        """The limits' families for /metrics: places held, lease calls, local refills."""
        held = GaugeMetricFamily(
            "mqtt_cluster_connection_places",
            "Places of tenants' max_connections this node holds in the cluster's counts",
        )
        held.add_metric([], sum(self.counts.counts.values()))
        leases = CounterMetricFamily(
            "mqtt_cluster_rate_leases", "Lease calls topping up this node's rate tokens"
        )
        leases.add_metric([], self.leases.leases)
        local = CounterMetricFamily(
            "mqtt_cluster_rate_local_refills",
            "Ticks Redis did not answer and the rate tokens were refilled locally (rate / nodes)",
        )
        local.add_metric([], self.leases.local_refills)
        yield from (held, leases, local)

"""One broker process as a node of the cluster: the `Cluster` port the server plugs in.

`Cluster` is a thin composition. It opens the node's Redis connections (`bus.Bus`), holds what
several rooms share — the route table of the other nodes (`routes`), the `Forwarder` (`forward`),
the drops counted here — and builds the rooms that do the work, each with its own state and
given only what it uses (the bus, `membership` as the `Peers` view, the rooms it calls):

- `membership`: the heartbeat, the others' liveness (`alive`, `dying`: its own), the island
  guard, joining and leaving; what it announces is followed by `their_routes` (versions),
  `sessions` (counted dead), `wills` (rewrite) and `inherit` (a dead node's place);
- `own_routes`: this node's route set in Redis (the router's changes as deltas, rewrites);
- `their_routes`: the other nodes' route sets into the table (the route channel);
- `publish`: the port's `publish` — here, and once to each other node with a matching route;
- `fences`: a replay's cut at every node (asked on the route channel, answered in Redis);
- `handover`: a shared group's kept messages from other nodes' holders to its new member here;
- `receive`: this node's forward stream, read and delivered here;
- `sessions`, `relay`, `departed`, `wills`, `inherit`, `limits`, `exactly`: one session per
  client id, the relays of moved sessions, the wills a survivor publishes, a survivor's part,
  the tenants' limits across the nodes, exactly once while sessions move;
- `node_metrics`: the node's `/metrics`.

The rooms that act on the broker get it at `start` (`attach`); the broker sees the node only as
its `Cluster` port, and the cluster steers the broker only through its hooks.

Life: `start` (before the broker is filled: restored subscriptions are routes too) joins and
starts the loops; `ready` (the broker is filled) starts reading what the others forward; `stop`
leaves, so the others drop this node's routes at once rather than after its TTL.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import redis.asyncio as aioredis
from prometheus_client.metrics_core import Metric
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError

from common.runtime.cancellation import stop_all
from data_plane.broker.broker import Broker
from data_plane.broker.connection import MQTTConnection
from data_plane.broker.message import Message
from data_plane.broker.ports import Published
from data_plane.cluster import node_metrics
from data_plane.cluster.bus import Bus
from data_plane.cluster.departed import Departed
from data_plane.cluster.exactly import Origins
from data_plane.cluster.fences import Fences
from data_plane.cluster.forward import Forwarder
from data_plane.cluster.handover import GroupHandover
from data_plane.cluster.inherit import Inheritor, forget_stream_mark
from data_plane.cluster.keys import Keys
from data_plane.cluster.limits import ClusterLimits
from data_plane.cluster.membership import Membership
from data_plane.cluster.own_routes import OwnRoutes
from data_plane.cluster.publish import Publisher
from data_plane.cluster.receive import Receiver
from data_plane.cluster.relay import Relays
from data_plane.cluster.routes import RouteTable
from data_plane.cluster.sessions import SessionClaims
from data_plane.cluster.their_routes import TheirRoutes
from data_plane.cluster.wills import WillRegistry

log = logging.getLogger("data_plane.cluster")


def new_node_id() -> str:
    """A node id no other process takes: host, pid and a random tail (a restarted pid)."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Cluster:
    """The `Cluster` port of the broker (data_plane.broker.ports), on Redis."""

    def __init__(
        self,
        url: str,
        *,
        name: str = "default",
        heartbeat: float = 2.0,
        node_id: str | None = None,
        info: dict[str, object] | None = None,
    ) -> None:
        self.url = url
        self.keys = Keys(name)
        self.heartbeat = heartbeat
        self.node_id = node_id or new_node_id()
        self.info = {"node": self.node_id, "host": socket.gethostname(), "pid": os.getpid()}
        self.info.update(info or {})
        self.info["started"] = time.time()
        timeout = max(1.0, heartbeat)
        # A command the bus does not answer fails within about a heartbeat (redis-py's default
        # retries for many seconds): the beat, the forwarder and the island guard need to know.
        retry = Retry(ExponentialBackoff(cap=0.25, base=0.05), 2)
        self.redis = aioredis.Redis.from_url(
            url, socket_timeout=timeout, socket_connect_timeout=timeout, retry=retry
        )
        # XREAD blocks: its own connection, with a timeout beyond the block.
        self.reader = aioredis.Redis.from_url(
            url, socket_timeout=timeout + 2, socket_connect_timeout=timeout, retry=retry
        )
        self.bus = Bus(self.node_id, self.keys, self.redis, self.reader, heartbeat, url)
        bus = self.bus
        # What several rooms read.
        self.table = RouteTable()
        self.forwarder = Forwarder(self.redis, self.keys.stream, self.node_id)
        self.broker: Any = None
        self.dropped: dict[str, int] = {}  # reason -> messages lost here (not the forwarder's)
        self.tasks: list[asyncio.Task[None]] = []
        drop = self.count_dropped_here
        # The rooms (see the module's docstring), each given what it uses.
        self.origins = Origins(self.node_id)  # exactly once while sessions move (exactly.py)
        self.own_routes = OwnRoutes(bus)
        self.membership = Membership(bus, self.info, self.table, self.own_routes, self.tasks)
        peers = self.membership  # who lives: membership owns it, the others read it
        self.fences = Fences(
            bus,
            self.table,
            self.own_routes,
            self.origins,
            peers,
            self.forwarder,
            load=lambda node_id: self.their_routes.load(node_id),
        )
        self.their_routes = TheirRoutes(
            bus, self.table, peers, self.own_routes.out_of_step, self.fences.asked
        )
        self.publisher = Publisher(self.node_id, self.table, peers, self.forwarder, self.origins)
        # Relays gone from the router, for late messages (not what a session got here).
        self.departed = Departed(self.redis, self.origins.second_copy)
        self.relays = Relays(self.forwarder, self.table, peers, self.departed)
        self.sessions = SessionClaims(
            bus,
            peers=peers,
            departed=self.departed,
            origins=self.origins,
            relays=self.relays,
            drop=drop,
        )
        self.handover = GroupHandover(
            self.node_id,
            self.table,
            peers,
            self.forwarder,
            self.fences.fence,
            self.publisher.hand_to,
        )
        self.receiver = Receiver(
            bus,
            sessions=self.sessions,
            departed=self.departed,
            drop=drop,
            handover=self.handover.on_marker,
        )
        self.wills = WillRegistry(bus)  # clients' wills a survivor publishes if we die
        self.inheritor = Inheritor(
            bus,
            table=self.table,
            peers=peers,
            forwarder=self.forwarder,
            origins=self.origins,
            own_routes=self.own_routes,
            sessions=self.sessions,
            wills=self.wills,
            drop=drop,
        )
        self.limits = ClusterLimits(bus, peers)  # tenants' limits across the nodes (`limits`)
        # What membership announces, and who follows it.
        self.membership.on_versions.append(self.their_routes.catch_up)
        self.membership.on_counted_dead.append(self.sessions.counted_dead)
        self.membership.on_rewrite.append(self.wills.rewrite)
        self.membership.take_place = self.inheritor.take_place
        # The port's two hot paths are the rooms' own methods: no call in between.
        self.publish: Callable[[Message], Published] = self.publisher.publish
        self.route_changed: Callable[[str, str, str | None, bool], None] = self.own_routes.changed
        self.hand_held = self.publisher.hand_held  # a group's held messages to its members
        self.fence = self.fences.fence  # a replay's cuts at the other nodes
        self.take_group = self.handover.take  # a group's kept messages from other nodes first

    @property
    def alive(self) -> dict[str, dict[str, object]]:
        """The other live nodes -> their description (`membership`'s, renewed every beat)."""
        return self.membership.alive

    @property
    def dying(self) -> set[str]:
        return self.membership.dying

    # -- life -----------------------------------------------------------------------------

    async def start(self, broker: Broker) -> None:
        """Attach to the broker (before any subscription is restored) and join."""
        self.broker = broker
        broker.metric_sources.append(self.metrics)
        for room in (self.publisher, self.sessions, self.receiver, self.wills, self.relays):
            room.attach(broker)
        self.inheritor.attach(broker)
        self.fences.attach(broker)
        self.handover.attach(broker)
        self.own_routes.attach(broker.router)
        self.membership.guard(broker.hooks)  # cut off from the bus: no new clients (CONNACK 0x88)
        self.forwarder.on_drop = self._count_dropped
        self.origins.attach(broker)  # moving sessions watched for duplicates (exactly.py)
        try:
            await self.membership.beat()
        except (RedisError, OSError) as exc:
            log.warning("cluster bus %s not reachable yet (%s): retrying", self.url, exc)
        loop = asyncio.get_running_loop()
        jobs = (
            self.membership.forever,
            self.their_routes.forever,
            self.own_routes.forever,
            self.wills.forever,
        )
        for job in jobs:
            self.tasks.append(loop.create_task(job()))
        await self.limits.start(broker)
        log.info("node %s joined cluster %s", self.node_id, self.keys.prefix)

    async def ready(self) -> None:
        """The broker is filled (persistent sessions restored, see `claim_restored`): take
        what other nodes forward from now on."""
        self.tasks.append(asyncio.get_running_loop().create_task(self.receiver.forever()))

    async def stop(self) -> None:
        """Leave: the others drop this node's routes now rather than after its TTL."""
        await stop_all(self.tasks, "cluster")
        await self.limits.stop()
        await self.membership.leave()
        await forget_stream_mark(self.broker, self.node_id)  # nobody drains our stream
        await self.redis.aclose()
        await self.reader.aclose()

    # -- the port (publish and route_changed: see __init__) ---------------------------------

    def members(self) -> list[dict[str, object]]:
        """The live nodes, this one included (for `$SYS/broker/nodes` and /metrics)."""
        return [self.info, *self.alive.values()]

    async def claim_restored(self, keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of the stored persistent sessions this node restores (see `sessions`)."""
        try:
            return await self.sessions.claim_restored(keys)
        except (RedisError, OSError) as exc:  # no bus: restore them all, as a single node
            log.warning("persistent sessions not claimed in the cluster: %s", exc)
            return set(keys)

    async def claim(self, tenant: str, client_id: str, clean_start: bool) -> None:
        """A CONNECT is about to open the session of `client_id`: it is this node's now (see
        `sessions`); returns once the node that held it has let it go."""
        await self.sessions.claim(tenant, client_id, clean_start)

    async def admit_connection(self, conn: MQTTConnection, tenant: str, limit: int) -> int:
        """The tenant's max_connections over every node (see `limits`)."""
        return await self.limits.admit(conn, tenant, limit)

    def rates_for(self, tenant: str, quota: dict[str, int]) -> Any:
        """The tenant's rate buckets, shared by every node (see `limits`)."""
        return self.limits.rates_for(tenant, quota)

    def figures(self, tenant: str, local: dict[str, object]) -> dict[str, object]:
        """The tenant's `$SYS` figures over every node (see `limits`)."""
        return self.limits.figures(tenant, local)

    # -- for the rooms --------------------------------------------------------------------

    def count_dropped_here(self, reason: str, count: int) -> None:
        """Messages this node could not keep for its sessions (e.g. the database refused)."""
        self.dropped[reason] = self.dropped.get(reason, 0) + count

    def _count_dropped(self, tenant: str, count: int) -> None:
        self.broker.accounts.dropped(tenant, count)

    def metrics(self) -> Iterator[Metric]:
        """The cluster's families for /metrics (see `node_metrics`)."""
        return node_metrics.collect(self)

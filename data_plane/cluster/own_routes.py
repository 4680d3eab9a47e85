"""This node's routes in Redis: the filters its clients subscribe to, told to the other nodes.

The broker's router reports each filter (or shared group) that gets its first local subscriber
or loses its last (`Router.on_route` → `Cluster.route_changed` → `OwnRoutes.changed`). Changes
gather for a moment (`ROUTE_FLUSH`) and go to Redis in one script call (`APPLY_ROUTES`) that
applies them to the node's set, bumps its version and publishes the delta on `Keys.channel`,
all at once. Other nodes apply deltas in version order (see `routes`, `their_routes`).

After any break in the connection (or the bus lost its data: the version key is gone, or the
node is no longer a member) `synced` drops and the next heartbeat (`membership`) rewrites the
whole set from the router — what the node's clients are subscribed to now is the truth — under
a version above any it used, and the others reload it: the table converges to the union of live
subscriptions within one heartbeat of Redis being back.

`lock` keeps a delta and a rewrite from passing each other on the way to Redis; a survivor
taking a dead node's place holds it too while its own changes wait for the switch (`inherit`).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator

from redis.exceptions import RedisError

from data_plane.broker.router import Router
from data_plane.cluster.bus import Bus
from data_plane.cluster.routes import APPLY_OPS_LUA, route_key

log = logging.getLogger("data_plane.cluster")

ROUTE_FLUSH = 0.005  # seconds route changes gather before going to Redis
ROUTE_CHUNK = 1000  # set members per SADD when a node rewrites its whole set

# KEYS: the node's route set, its version. ARGV: channel, node id, then "+key" / "-key" ops.
# Returns the new version, or -1 when the version key is gone (Redis lost the node's data:
# the caller rewrites the whole set instead).
APPLY_ROUTES = (
    APPLY_OPS_LUA
    + """
if redis.call('EXISTS', KEYS[2]) == 0 then return -1 end
local version = redis.call('INCR', KEYS[2])
local added, removed = apply_ops(KEYS[1], 3)
redis.call('PUBLISH', ARGV[1], cjson.encode({node = ARGV[2], version = version,
  added = added, removed = removed}))
return version
"""
)


class OwnRoutes:
    """This node's route set in Redis, kept equal to its router's routes."""

    router: Router  # the broker's (`attach`, at the node's start): what the clients here hold

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.synced = False  # our route set in Redis is what the router holds
        self.version = 0  # of our route set: only grows, across Redis restarts too
        self.pending: dict[str, bool] = {}  # route key -> added (the last change wins)
        self.wake = asyncio.Event()
        self.lock = asyncio.Lock()
        self.apply_routes = bus.redis.register_script(APPLY_ROUTES)

    def attach(self, router: Router) -> None:
        self.router = router

    def out_of_step(self) -> None:
        """The others may have missed our deltas (a break on the bus): the beat rewrites the
        whole set (`membership`)."""
        self.synced = False

    def changed(self, tenant: str, topic_filter: str, group: str | None, added: bool) -> None:
        """The router's `on_route`: a route of ours came or went (sent with the next flush)."""
        self.pending[route_key(tenant, topic_filter, group)] = added
        self.wake.set()

    def _local_routes(self) -> Iterator[str]:
        for tenant, router in list(self.router.tenants.items()):
            for topic_filter, group in router.routes():
                yield route_key(tenant, topic_filter, group)

    async def forever(self) -> None:
        """Send the gathered changes as one delta, for as long as the node runs."""
        keys, node_id = self.bus.keys, self.bus.node_id
        while True:
            await self.wake.wait()
            await asyncio.sleep(ROUTE_FLUSH)  # gather a burst of subscriptions into one call
            self.wake.clear()
            if not self.synced or not self.pending:
                continue  # changes wait for the rewrite, which wakes this loop when done
            async with self.lock:  # never beside a rewrite: Redis must see them in order
                if not self.synced or not self.pending:
                    continue  # a rewrite ran meanwhile and took them
                pending, self.pending = self.pending, {}
                ops = [("+" if added else "-") + key for key, added in pending.items()]
                try:
                    version = await self.apply_routes(
                        keys=[keys.routes(node_id), keys.version(node_id)],
                        args=[keys.channel, node_id, *ops],
                    )
                except (RedisError, OSError) as exc:
                    version = exc
            if isinstance(version, Exception):
                log.warning("route changes not written (%s): rewriting after reconnect", version)
                self.synced = False
                continue
            if version == -1:  # Redis lost our data (restarted): the beat rewrites it all
                self.synced = False
            else:
                self.version = version

    async def flushed(self, timeout: float) -> int | None:
        """The version of our set that holds every change made so far, once Redis has it;
        None when it is not there within `timeout` seconds (Redis away)."""
        deadline = asyncio.get_running_loop().time() + timeout
        while self.pending or self.lock.locked() or not self.synced:
            if asyncio.get_running_loop().time() > deadline:
                return None
            await asyncio.sleep(ROUTE_FLUSH)
        return self.version

    async def rewrite(self) -> None:
        """Our whole route set from the router, under a version above any we used."""
        async with self.lock:
            await self._rewrite_locked()
        if self.pending:  # changed while we wrote: they go as the next delta
            self.wake.set()

    async def _rewrite_locked(self) -> None:
        keys, node_id = self.bus.keys, self.bus.node_id
        self.pending.clear()  # the router holds them all: the snapshot below has them
        routes = list(self._local_routes())
        version = self.version + 1
        pipe = self.bus.redis.pipeline(transaction=True)
        pipe.delete(keys.routes(node_id))
        for start in range(0, len(routes), ROUTE_CHUNK):
            pipe.sadd(keys.routes(node_id), *routes[start : start + ROUTE_CHUNK])
        pipe.set(keys.version(node_id), version)
        pipe.publish(keys.channel, json.dumps({"node": node_id, "version": version, "reset": 1}))
        await pipe.execute()
        self.version = version
        self.synced = True
        log.info("node %s wrote its %d routes (version %d)", node_id, len(routes), version)

"""Who is in the cluster: this node's heartbeat, the others' liveness, joining and leaving.

The node writes `Keys.node(id)` (its description, JSON) with a TTL of 1.5 × the heartbeat every
half heartbeat, and adds itself to `Keys.members`. Every half heartbeat it also reads the
members: one whose key has expired is dead, so a node that died is noticed at most
1.5 + 0.5 = 2 heartbeats after its last write. Its routes stay in the table (`dying`:
messages for it wait in its stream) until one survivor (whoever takes `Keys.purge(id)` first,
as EMQX's router helper takes a global lock) has taken its place (`inherit`: its persistent
sessions, its stream, its clients' wills) and switched every node from it to itself in one
message.

When the bus comes back after an outage (or Redis restarted and lost every key), the nodes
this one knew alive get a TTL from then before they are counted dead: they could not beat
meanwhile, and the first node to reconnect must not take the place of the others.

A node that stalled past its TTL and comes back finds itself gone (`SADD` answers 1) and
rewrites everything (its routes, its wills), like a node after a Redis restart; if a survivor
took its place (its tombstone, `Keys.dead`) its clients go first (announced: `on_counted_dead`,
followed by `SessionClaims.counted_dead`). The beat is also where the route table catches up:
every live node's version is announced (`on_versions`: `their_routes` loads a node whose version
is ahead of the table's), and this node's own set is rewritten when Redis lost it or it fell out
of step (`own_routes`).

Membership owns liveness; the rooms that follow it are registered at composition
(data_plane.cluster.node) and never call back into it, except through what they are given: the
route channel's sightings (`seen`, `gone`: `their_routes`), and the callback a survivor calls
once every node has switched from the dead node to it (`inherit`).

Cut off from the bus for as long as the others take to count it dead, this node would be an
island (its clients would see nothing of the others'): new clients are refused (CONNACK 0x88)
until the bus answers again (`guard`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from common.mqtt.packets import Connect
from common.mqtt.reason_codes import ReasonCode
from data_plane.broker.auth import AuthResult
from data_plane.broker.hooks import Hooks
from data_plane.cluster.bus import Bus
from data_plane.cluster.own_routes import OwnRoutes
from data_plane.cluster.routes import RouteTable

log = logging.getLogger("data_plane.cluster")


class _Unavailable:
    """What the handshake's redirect hook answers to refuse a client: CONNACK 0x88 (3.1.1: 3,
    Server unavailable) without a Server Reference."""

    reason_code = ReasonCode.SERVER_UNAVAILABLE
    reference = ""


UNAVAILABLE = _Unavailable()


class Membership:
    """This node's heartbeat and its view of the others (`alive`, `dying`: the `Peers` every
    room reads). It owns liveness and announces its changes to the rooms that follow them,
    registered at composition (data_plane.cluster.node): none of them calls back into it."""

    def __init__(
        self,
        bus: Bus,
        info: dict[str, object],
        table: RouteTable,
        own_routes: OwnRoutes,
        tasks: list[asyncio.Task[None]],
    ) -> None:
        self.bus = bus
        self.info = info  # this node's description, written with each beat
        self.table = table  # a node with routes here is dying, not gone, until replaced
        self.own_routes = own_routes  # rewritten by the beat when Redis lost it
        self.tasks = tasks  # the node's: a survivor's inheritance runs there
        self.alive: dict[str, dict[str, object]] = {}  # other live nodes -> their description
        # Dead nodes no survivor has taken the place of yet: still forwarded to (their streams
        # are drained into their adopted sessions, see `inherit`).
        self.dying: set[str] = set()
        # -- what it announces (the followers are registered at composition) --
        # Every live node's route version, each beat (`their_routes` loads what it missed).
        self.on_versions: list[Callable[[dict[str, int]], Awaitable[None]]] = []
        # This node was counted dead and a survivor took its place (`sessions`: clients go).
        self.on_counted_dead: list[Callable[[], None]] = []
        # Counted dead, or Redis lost our data: what is ours is written again (`wills`).
        self.on_rewrite: list[Callable[[], None]] = []
        # A survivor's part, once it holds a dead node's purge lock (`inherit`): called with
        # the dead node and what to call once every node switched from it to this one.
        self.take_place: Callable[[str, Callable[[str], None]], Awaitable[None]] | None = None
        self.bus_up = False
        self.last_ok = float("-inf")  # monotonic time of the last heartbeat Redis took
        # When the bus came back (or Redis was found to have lost our data): the others could
        # not beat before either, so none of them is counted dead until it had a TTL to.
        self.back_at = float("-inf")
        self.refused = 0  # connections refused while cut off
        self.inheriting: set[str] = set()  # dead nodes this one is taking the place of

    @property
    def cut_off(self) -> bool:
        """No heartbeat got through for as long as the others take to count us dead."""
        return time.monotonic() - self.last_ok > 1.5 * self.bus.heartbeat

    def guard(self, hooks: Hooks) -> None:
        """Refuse new clients (0x88) while cut off: a `client.redirect` hook of the broker's,
        ahead of any other (data_plane.broker.hooks)."""
        hooks.add("client.redirect", self._refuse_when_cut_off, priority=100)

    def _refuse_when_cut_off(self, _connect: Connect, _result: AuthResult) -> _Unavailable | None:
        if self.cut_off:
            self.refused += 1
            return UNAVAILABLE
        return None

    async def forever(self) -> None:
        """Beat every half heartbeat for as long as the node runs."""
        while True:
            await asyncio.sleep(self.bus.heartbeat / 2)
            try:
                await self.beat()
            except (RedisError, OSError) as exc:
                if self.bus_up:
                    log.warning("cluster bus lost: %s", exc)
                self.bus_up = False
                self.own_routes.out_of_step()

    async def beat(self) -> None:
        """Renew our key, then read who lives (see the module's docstring)."""
        bus = self.bus
        keys, node_id, redis = bus.keys, bus.node_id, bus.redis
        ttl = int(bus.heartbeat * 1500)
        pipe = redis.pipeline(transaction=False)
        pipe.set(keys.node(node_id), json.dumps(self.info), px=ttl)
        pipe.sadd(keys.members, node_id)
        pipe.exists(keys.version(node_id))
        pipe.smembers(keys.members)
        _, added, has_version, members = await pipe.execute()
        self.last_ok = time.monotonic()
        if not self.bus_up:
            log.info("cluster bus %s up", bus.url)
        if not self.bus_up or not has_version:
            self.back_at = self.last_ok
        self.bus_up = True
        if added and await redis.delete(keys.dead(node_id)):
            # We stalled past our TTL and a survivor took our place (our clients' wills are
            # out, our persistent sessions adopted): our clients go, to reconnect anywhere.
            for follower in self.on_counted_dead:
                follower()
        if added or not has_version:  # counted dead, or Redis lost our data: wills again
            for follower in self.on_rewrite:
                follower()
        if added or not has_version or not self.own_routes.synced:
            await self.own_routes.rewrite()  # joined, reconnected, or Redis lost our data
        others = sorted({m.decode() for m in members} - {node_id})
        alive: dict[str, dict[str, object]] = {}
        versions: dict[str, int] = {}
        if others:
            pipe = redis.pipeline(transaction=False)
            pipe.mget([keys.node(n) for n in others])
            pipe.mget([keys.version(n) for n in others])
            infos, found = await pipe.execute()
            for other, info, version in zip(others, infos, found, strict=True):
                if info is not None:
                    alive[other] = json.loads(info)
                    versions[other] = int(version) if version is not None else 0
        # A node we knew alive whose key is missing right after the bus came back may only have
        # lost it with Redis (a restart) and not beaten since: it gets a TTL from then.
        grace = self.last_ok - self.back_at < 1.5 * bus.heartbeat
        for other in list(self.alive) + [n for n in others if n not in alive]:
            if other not in alive:
                if grace and other in self.alive:
                    alive[other] = self.alive[other]
                    continue
                self._dead(other)
                await self._purge(other)
        for other in (set(self.table.nodes) | self.dying) - set(others):
            self.gone(other)  # no longer a member: its successor's message was missed
        for other in alive:
            if other not in self.alive:
                log.info("node %s is up", other)
        self.alive = alive
        for listener in self.on_versions:  # a new node, or a delta of one was missed
            await listener(versions)

    def seen(self, node_id: str) -> None:
        """`node_id` wrote on the bus, so it lives; the beat fills in the rest."""
        if node_id not in self.alive:
            self.alive[node_id] = {"node": node_id}

    def _dead(self, node_id: str) -> None:
        if node_id in self.alive:
            log.warning("node %s is dead (no heartbeat for 1.5 × %ss)", node_id, self.bus.heartbeat)
        self.alive.pop(node_id, None)
        if node_id in self.table.nodes:  # its routes stay until a survivor takes its place
            self.dying.add(node_id)

    def gone(self, node_id: str) -> None:
        """A node left, or a survivor took its place: out of the table."""
        self.alive.pop(node_id, None)
        self.dying.discard(node_id)
        self.table.drop(node_id)

    async def _purge(self, node_id: str) -> None:
        """One survivor takes a dead node's place (data_plane.cluster.inherit): adopts its
        persistent sessions, drains its stream into them, then removes its routes and stream."""
        take_place = self.take_place
        if node_id in self.inheriting or take_place is None:
            return
        bus = self.bus
        taken = await bus.redis.set(
            bus.keys.purge(node_id), bus.node_id, nx=True, px=int(bus.heartbeat * 5000)
        )
        if not taken:
            return
        self.inheriting.add(node_id)
        task = self._take_place(node_id, take_place)
        self.tasks.append(asyncio.get_running_loop().create_task(task))

    async def _take_place(
        self, node_id: str, take_place: Callable[[str, Callable[[str], None]], Awaitable[None]]
    ) -> None:
        try:
            await take_place(node_id, self.gone)
        finally:
            self.inheriting.discard(node_id)

    async def leave(self) -> None:
        """Out of the cluster at once: the others drop our routes now rather than after our
        TTL (our clients were told to go: no will of theirs is left either)."""
        keys, node_id = self.bus.keys, self.bus.node_id
        try:
            pipe = self.bus.redis.pipeline(transaction=True)
            pipe.srem(keys.members, node_id)
            pipe.delete(
                keys.node(node_id),
                keys.routes(node_id),
                keys.version(node_id),
                keys.stream(node_id),
                keys.wills(node_id),  # its clients were told to go: no will left
            )
            pipe.publish(keys.channel, json.dumps({"node": node_id, "left": True}))
            await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("could not leave the cluster cleanly: %s", exc)

"""One broker process as a node of the cluster: membership, its routes, forwarding, receiving.

Membership: the node writes `Keys.node(id)` (its description, JSON) with a TTL of 1.5 × the
heartbeat every half heartbeat, and adds itself to `Keys.members`. Every half heartbeat it also
reads the members: one whose key has expired is dead, so a node that died is noticed at most
1.5 + 0.5 = 2 heartbeats after its last write. Its routes stay in the table (`dying`: messages
for it wait in its stream) until one survivor (whoever takes `Keys.purge(id)` first, as EMQX's
router helper takes a global lock) has taken its place (`inherit`: its persistent sessions,
its stream, its clients' wills) and switched every node from it to itself in one message. A
node that stalled past its TTL and comes back finds itself gone (`SADD` answers 1) and
rewrites everything, like a node after a Redis restart; if a survivor took its place (its
tombstone, `Keys.dead`) its clients go first (`SessionClaims.counted_dead`).

Routes: the broker's router reports each filter (or shared group) that gets its first local
subscriber or loses its last (`Router.on_route`). Changes gather for a moment and go to Redis in
one script call that applies them to the node's set, bumps its version and publishes the delta
on `Keys.channel`, all at once. Other nodes apply deltas in version order (see `routes`). After
any break in the connection (or the bus lost its data: the version key is gone, or the node is
no longer a member) the node rewrites its whole set from the router — what its clients are
subscribed to now is the truth — and the others reload it: the table converges to the union of
live subscriptions within one heartbeat of Redis being back. The same holds when only the route
channel broke (redis-py reconnects it quietly, e.g. after Redis' output-buffer limit cut a node
that read too slowly): the node reloads every other node's set and rewrites its own.

Forwarding and receiving: see `forward`. The node reads its own stream through its consumer
group (XREADGROUP) and acknowledges (XACK) a batch of entries once what they delivered to
persistent sessions is committed (see `inherit` for why); each message is delivered with `Broker.route` (not counted again as received,
not filtered, not stored as retained: the publishing node did all that), and a retained message
is put in the local retained store too (sent to every live node, so a new subscription anywhere
sees it at once; Postgres keeps it across restarts as before).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import redis.asyncio as aioredis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import RedisError, ResponseError

from common.mqtt.reason_codes import ReasonCode
from data_plane.broker.ports import Published
from data_plane.cluster import codec
from data_plane.cluster.exactly import Origins
from data_plane.cluster.forward import PAUSE_BYTES, STREAM_MAXLEN, Forwarder
from data_plane.cluster.inherit import (
    GROUP,
    ensure_group,
    forget_stream_mark,
    inherit,
    settle,
    stream_mark,
)
from data_plane.cluster.limits import ClusterLimits
from data_plane.cluster.regroup import serve_here
from data_plane.cluster.routes import APPLY_OPS_LUA, RouteTable, route_key
from data_plane.cluster.sessions import SessionClaims, encode_control
from data_plane.cluster.wills import WillRegistry

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


class Keys:
    """Where the cluster named `name` keeps things in Redis."""

    def __init__(self, name: str) -> None:
        self.prefix = f"mqtt-cluster:{name}"
        self.members = f"{self.prefix}:members"
        self.channel = f"{self.prefix}:routes"

    def node(self, node_id: str) -> str:
        return f"{self.prefix}:node:{node_id}"

    def routes(self, node_id: str) -> str:
        return f"{self.prefix}:routes:{node_id}"

    def version(self, node_id: str) -> str:
        return f"{self.prefix}:version:{node_id}"

    def stream(self, node_id: str) -> str:
        return f"{self.prefix}:stream:{node_id}"

    def purge(self, node_id: str) -> str:
        return f"{self.prefix}:purge:{node_id}"

    def dead(self, node_id: str) -> str:
        """Left by the survivor that took a dead node's place (see `inherit`)."""
        return f"{self.prefix}:dead:{node_id}"


class _Unavailable:
    """What the handshake's redirect hook answers to refuse a client: CONNACK 0x88 (3.1.1: 3,
    Server unavailable) without a Server Reference."""

    reason_code = ReasonCode.SERVER_UNAVAILABLE
    reference = ""


UNAVAILABLE = _Unavailable()


def new_node_id() -> str:
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
        info: dict[str, Any] | None = None,
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
        self.table = RouteTable()
        self.forwarder = Forwarder(self.redis, self.keys.stream, self.node_id)
        self.broker: Any = None
        self.alive: dict[str, dict[str, Any]] = {}  # other live nodes -> their description
        # Dead nodes no survivor has taken the place of yet: still forwarded to (their streams
        # are drained into their adopted sessions, see `inherit`).
        self.dying: set[str] = set()
        self.inheriting: set[str] = set()  # dead nodes this one is taking the place of
        self.dropped: dict[str, int] = {}  # reason -> messages lost here (not the forwarder's)
        self.resubscribed = 0  # times the route channel had to be subscribed again
        self.stream_seen: dict[bytes, int] = {}  # writer -> its `c` in the last entry read
        self.bus_up = False
        self.synced = False  # our route set in Redis is what the router holds
        self.version = 0  # of our route set: only grows, across Redis restarts too
        self.pending: dict[str, bool] = {}  # route key -> added (the last change wins)
        self.routes_wake = asyncio.Event()
        self.routes_lock = asyncio.Lock()
        self.received = 0
        self.tasks: list[asyncio.Task] = []
        self.apply_routes = self.redis.register_script(APPLY_ROUTES)
        self.loading: set[str] = set()
        self.sessions = SessionClaims(self)
        self.wills = WillRegistry(self)  # clients' wills a survivor publishes if we die
        self.last_ok = float("-inf")  # monotonic time of the last heartbeat Redis took
        self.refused = 0  # connections refused while cut off
        self.turns: dict[tuple[str, tuple[str, str]], int] = {}  # shared group -> next turn
        self.limits = ClusterLimits(self)  # tenants' limits across the nodes (see `limits`)
        self.origins = Origins(self.node_id)  # exactly once while sessions move (exactly.py)

    # -- life -----------------------------------------------------------------------------

    async def start(self, broker: Any) -> None:
        """Attach to the broker (before any subscription is restored) and join."""
        self.broker = broker
        broker.metric_sources.append(self.metrics)
        # Cut off from the bus, this node would be an island (its clients would see nothing of
        # the others'): new clients are refused (CONNACK 0x88) until the bus answers again.
        previous = broker.redirect

        def refuse_when_cut_off(connect: Any, result: Any) -> Any:
            if self.cut_off:
                self.refused += 1
                return UNAVAILABLE
            return previous(connect, result) if previous is not None else None

        broker.redirect = refuse_when_cut_off
        self.forwarder.on_drop = self._count_dropped
        self.wills.attach(broker)  # the wills of clients not kept in Postgres, into Redis
        self.origins.attach(broker)  # moving sessions watched for duplicates (exactly.py)
        try:
            await self._beat()
        except (RedisError, OSError) as exc:
            log.warning("cluster bus %s not reachable yet (%s): retrying", self.url, exc)
        loop = asyncio.get_running_loop()
        jobs = (self._beat_forever, self._listen_forever, self._routes_forever, self.wills.forever)
        for job in jobs:
            self.tasks.append(loop.create_task(job()))
        await self.limits.start(broker)
        log.info("node %s joined cluster %s", self.node_id, self.keys.prefix)

    async def ready(self) -> None:
        """The broker is filled (persistent sessions restored, see `claim_restored`): take
        what other nodes forward from now on."""
        self.tasks.append(asyncio.get_running_loop().create_task(self._read_forever()))

    async def stop(self) -> None:
        """Leave: the others drop this node's routes now rather than after its TTL."""
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.limits.stop()
        try:
            pipe = self.redis.pipeline(transaction=True)
            pipe.srem(self.keys.members, self.node_id)
            pipe.delete(
                self.keys.node(self.node_id),
                self.keys.routes(self.node_id),
                self.keys.version(self.node_id),
                self.keys.stream(self.node_id),
                self.wills.key(self.node_id),  # its clients were told to go: no will left
            )
            pipe.publish(self.keys.channel, json.dumps({"node": self.node_id, "left": True}))
            await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("could not leave the cluster cleanly: %s", exc)
        await forget_stream_mark(self.broker, self.node_id)  # nobody drains our stream
        await self.redis.aclose()
        await self.reader.aclose()

    # -- the port -------------------------------------------------------------------------

    def publish(self, message: Any) -> Published:
        broker = self.broker
        seq = self.origins.local(message)  # its origin, carried by every copy (exactly.py)
        plain, shared = self.table.match(message.tenant, message.topic)
        assigned: dict[str, list[tuple[str, str]]] = {}
        if not shared:  # the common case: every matching group (if any) is here only
            local = broker.route(message)
            if not plain and not (message.retain and self.alive):
                return local
        else:
            mine = self._assign_groups(message, shared, assigned)
            local = broker.route(message, lambda group: (group.topic_filter, group.name) in mine)
        targets: dict[str, tuple[tuple[str, str], ...]] = {}
        alive, dying = self.alive, self.dying
        for node in plain:  # a dead node's stream keeps its messages until a survivor takes over
            if node.node_id in alive or node.node_id in dying:  # else not seen yet
                targets[node.node_id] = ()
        for node_id, keys in assigned.items():
            targets[node_id] = tuple(keys)
        wait = message.qos > 0
        commit = None
        flags = codec.DELIVER | (codec.RETAIN if message.retain else 0)
        plain_data = None  # the same bytes for every node that serves no group
        forwarder = self.forwarder
        for node_id, groups in targets.items():
            if groups:
                data = codec.encode(message, flags, groups, seq=seq)
            else:
                if plain_data is None:
                    plain_data = codec.encode(message, flags, seq=seq)
                data = plain_data
            commit = forwarder.add(node_id, data, message.tenant, message.qos, wait)
        if message.retain:  # every node's retained store has it, subscribers there or not
            for node_id in self.alive:
                if node_id not in targets:
                    data = codec.encode(message, codec.RETAIN)
                    self.forwarder.add(node_id, data, message.tenant, 0, False)
        if not targets:
            return local
        slow_down = local.slow_down
        if forwarder.buffered > PAUSE_BYTES:  # the bus lags: its publisher waits for it
            slow_down = (*slow_down, forwarder)
        reached = local.reached + len(targets)
        if commit is None:
            return Published(reached, local.commits, slow_down)
        return Published(reached, [*local.commits, commit], slow_down)

    def _assign_groups(
        self,
        message: Any,
        shared: list[tuple[tuple[str, str], list[Any]]],
        assigned: dict[str, list[tuple[str, str]]],
    ) -> set[tuple[str, str]]:
        """One node per matching shared group (filter, group) for this message, in turn among
        the nodes with members (this one included); fills `assigned` (node -> its groups) and
        returns the groups this node serves."""
        here = {
            (group.topic_filter, group.name)
            for group in self.broker.router.match(message.tenant, message.topic)[1]
        }
        remote = {
            key: sorted(node.node_id for node in nodes if node.node_id in self.alive)
            for key, nodes in shared
        }
        mine: set[tuple[str, str]] = set()
        if len(self.turns) > 100_000:  # groups come and go: forget old turns now and then
            self.turns.clear()
        for key in here | remote.keys():
            candidates = ([self.node_id] if key in here else []) + remote.get(key, [])
            if not candidates:
                continue
            turn_key = (message.tenant, key)
            turn = self.turns.get(turn_key, 0)
            self.turns[turn_key] = turn + 1
            chosen = candidates[turn % len(candidates)]
            if chosen == self.node_id:
                mine.add(key)
            else:
                assigned.setdefault(chosen, []).append(key)
        return mine

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

    async def control(self, node_id: str, body: dict[str, Any]) -> None:
        """A control message (session takeover) to another node, on its forward stream."""
        await self.redis.xadd(
            self.keys.stream(node_id),
            {b"c": encode_control(body)},
            maxlen=STREAM_MAXLEN,
            approximate=True,
        )

    # -- tenants' limits across the nodes (data_plane.cluster.limits) ----------------------

    async def admit_connection(self, conn: Any, tenant: str, limit: int) -> int:
        return await self.limits.admit(conn, tenant, limit)

    def rates_for(self, tenant: str, quota: dict[str, int]) -> Any:
        return self.limits.rates_for(tenant, quota)

    def figures(self, tenant: str, local: dict[str, Any]) -> dict[str, Any]:
        return self.limits.figures(tenant, local)

    @property
    def cut_off(self) -> bool:
        """No heartbeat got through for as long as the others take to count us dead."""
        return time.monotonic() - self.last_ok > 1.5 * self.heartbeat

    def members(self) -> list[dict[str, Any]]:
        return [self.info, *self.alive.values()]

    # -- routes: ours ---------------------------------------------------------------------

    def route_changed(self, tenant: str, topic_filter: str, group: str | None, added: bool) -> None:
        self.pending[route_key(tenant, topic_filter, group)] = added
        self.routes_wake.set()

    def _local_routes(self) -> Iterator[str]:
        for tenant, router in list(self.broker.router.tenants.items()):
            for topic_filter, group in router.routes():
                yield route_key(tenant, topic_filter, group)

    async def _routes_forever(self) -> None:
        while True:
            await self.routes_wake.wait()
            await asyncio.sleep(ROUTE_FLUSH)  # gather a burst of subscriptions into one call
            self.routes_wake.clear()
            if not self.synced or not self.pending:
                continue  # changes wait for the rewrite, which wakes this loop when done
            async with self.routes_lock:  # never beside a rewrite: Redis must see them in order
                if not self.synced or not self.pending:
                    continue  # a rewrite ran meanwhile and took them
                pending, self.pending = self.pending, {}
                ops = [("+" if added else "-") + key for key, added in pending.items()]
                try:
                    version = await self.apply_routes(
                        keys=[self.keys.routes(self.node_id), self.keys.version(self.node_id)],
                        args=[self.keys.channel, self.node_id, *ops],
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

    async def _rewrite_routes(self) -> None:
        """Our whole route set from the router, under a version above any we used."""
        async with self.routes_lock:
            await self._rewrite_routes_locked()
        if self.pending:  # changed while we wrote: they go as the next delta
            self.routes_wake.set()

    async def _rewrite_routes_locked(self) -> None:
        self.pending.clear()  # the router holds them all: the snapshot below has them
        routes = list(self._local_routes())
        version = self.version + 1
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(self.keys.routes(self.node_id))
        for start in range(0, len(routes), ROUTE_CHUNK):
            pipe.sadd(self.keys.routes(self.node_id), *routes[start : start + ROUTE_CHUNK])
        pipe.set(self.keys.version(self.node_id), version)
        pipe.publish(
            self.keys.channel, json.dumps({"node": self.node_id, "version": version, "reset": 1})
        )
        await pipe.execute()
        self.version = version
        self.synced = True
        log.info("node %s wrote its %d routes (version %d)", self.node_id, len(routes), version)

    # -- routes: the others' --------------------------------------------------------------

    async def _load(self, node_id: str) -> None:
        """A node's whole route set, with the version it stands at."""
        if node_id in self.loading:
            return
        self.loading.add(node_id)
        try:
            pipe = self.redis.pipeline(transaction=True)
            pipe.get(self.keys.version(node_id))
            pipe.smembers(self.keys.routes(node_id))
            version, members = await pipe.execute()
        finally:
            self.loading.discard(node_id)
        if version is None:
            return  # not written yet (or purged): its reset message or the next beat brings it
        self.table.replace(node_id, int(version), {m.decode() for m in members})

    def _on_route_message(self, data: bytes) -> None:
        change = json.loads(data)
        node_id = change["node"]
        if node_id == self.node_id:
            return
        if change.get("left"):
            self.gone(node_id)
            log.info("node %s left", node_id)
            return
        if change.get("replaces"):  # a survivor took a dead node's place: switch at once
            self.gone(change["replaces"])
        if node_id not in self.alive:  # it wrote, so it lives; the beat fills in the rest
            self.alive[node_id] = {"node": node_id}
        if change.get("reset") or not self.table.apply(
            node_id, change["version"], change.get("added") or [], change.get("removed") or []
        ):
            asyncio.get_running_loop().create_task(self._load_quietly(node_id))

    async def _load_quietly(self, node_id: str) -> None:
        try:
            await self._load(node_id)
        except (RedisError, OSError) as exc:
            log.warning("routes of node %s not loaded (%s): next beat", node_id, exc)

    async def _listen_forever(self) -> None:
        while True:
            pubsub = self.redis.pubsub()
            channel = None
            try:
                await pubsub.subscribe(self.keys.channel)
                channel = pubsub.connection  # redis-py reconnects it quietly: we want to know
                channel.register_connect_callback(self._channel_reconnected)
                # Deltas sent before this subscription are missed: the beat's version check
                # (right below, and every half heartbeat) loads whatever changed meanwhile.
                for node_id in list(self.table.nodes):
                    await self._load(node_id)
                while True:
                    message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
                    if message is not None and message["type"] == "message":
                        self._on_route_message(message["data"])
            except (RedisError, OSError) as exc:
                # E.g. Redis' output-buffer limit cut this (slow) subscriber off: whatever was
                # published meanwhile is reloaded above, and our own set is announced again.
                log.warning("route channel lost (%s): resubscribing", exc)
                self.resubscribed += 1
                self.synced = False
                await asyncio.sleep(min(1.0, self.heartbeat / 2))
            finally:
                if channel is not None:
                    channel.deregister_connect_callback(self._channel_reconnected)
                try:
                    await pubsub.aclose()
                except (RedisError, OSError):
                    pass

    def _channel_reconnected(self, _connection: Any) -> None:
        """redis-py took the route channel up again by itself (Redis restarted, or its
        output-buffer limit cut this node off for reading too slowly): the deltas published
        meanwhile are lost, so every node's set is reloaded and ours announced anew."""
        log.warning("route channel reconnected: reloading the route table")
        self.resubscribed += 1
        self.synced = False  # the beat rewrites our set (the others reload it)
        loop = asyncio.get_running_loop()
        for node_id in list(self.table.nodes):
            loop.create_task(self._load_quietly(node_id))

    # -- membership -----------------------------------------------------------------------

    async def _beat_forever(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat / 2)
            try:
                await self._beat()
            except (RedisError, OSError) as exc:
                if self.bus_up:
                    log.warning("cluster bus lost: %s", exc)
                self.bus_up = False
                self.synced = False

    async def _beat(self) -> None:
        ttl = int(self.heartbeat * 1500)
        pipe = self.redis.pipeline(transaction=False)
        pipe.set(self.keys.node(self.node_id), json.dumps(self.info), px=ttl)
        pipe.sadd(self.keys.members, self.node_id)
        pipe.exists(self.keys.version(self.node_id))
        pipe.smembers(self.keys.members)
        _, added, has_version, members = await pipe.execute()
        self.last_ok = time.monotonic()
        if not self.bus_up:
            log.info("cluster bus %s up", self.url)
        self.bus_up = True
        if added and await self.redis.delete(self.keys.dead(self.node_id)):
            # We stalled past our TTL and a survivor took our place (our clients' wills are
            # out, our persistent sessions adopted): our clients go, to reconnect anywhere.
            self.sessions.counted_dead()
        if added or not has_version:  # counted dead, or Redis lost our data: wills again
            self.wills.rewrite()
        if added or not has_version or not self.synced:
            await self._rewrite_routes()  # joined, reconnected, or Redis lost our data
        others = sorted({m.decode() for m in members} - {self.node_id})
        alive: dict[str, dict[str, Any]] = {}
        versions: dict[str, int] = {}
        if others:
            pipe = self.redis.pipeline(transaction=False)
            pipe.mget([self.keys.node(n) for n in others])
            pipe.mget([self.keys.version(n) for n in others])
            infos, found = await pipe.execute()
            for node_id, info, version in zip(others, infos, found, strict=True):
                if info is not None:
                    alive[node_id] = json.loads(info)
                    versions[node_id] = int(version) if version is not None else 0
        for node_id in list(self.alive) + [n for n in others if n not in alive]:
            if node_id not in alive:
                self._dead(node_id)
                await self._purge(node_id)
        for node_id in (set(self.table.nodes) | self.dying) - set(others):
            self.gone(node_id)  # no longer a member: its successor's message was missed
        for node_id in alive:
            if node_id not in self.alive:
                log.info("node %s is up", node_id)
        self.alive = alive
        for node_id, version in versions.items():
            known = self.table.nodes.get(node_id)
            if known is None or known.version < version:
                await self._load(node_id)  # new, or a delta of it was missed

    def _dead(self, node_id: str) -> None:
        if node_id in self.alive:
            log.warning("node %s is dead (no heartbeat for 1.5 × %ss)", node_id, self.heartbeat)
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
        if node_id in self.inheriting:
            return
        taken = await self.redis.set(
            self.keys.purge(node_id), self.node_id, nx=True, px=int(self.heartbeat * 5000)
        )
        if not taken:
            return
        self.inheriting.add(node_id)
        self.tasks.append(asyncio.get_running_loop().create_task(inherit(self, node_id)))

    # -- receiving ------------------------------------------------------------------------

    async def _read_forever(self) -> None:
        """Our stream through its consumer group: an entry is acknowledged once what it
        delivered to persistent sessions is committed (see `inherit`: a survivor delivers what
        is not acknowledged when this node dies)."""
        stream = self.keys.stream(self.node_id)
        trimmed = time.monotonic()
        grouped = False
        while True:
            try:
                if not grouped:  # at start, and after Redis lost it (restarted)
                    await ensure_group(self.reader, stream)
                    grouped = True
                answer = await self.reader.xreadgroup(
                    GROUP, self.node_id, {stream: ">"}, count=64, block=1000
                )
            except (RedisError, OSError) as exc:
                if not isinstance(exc, ResponseError):
                    await asyncio.sleep(min(1.0, self.heartbeat / 2))
                log.debug("forward stream read failed (%s): retrying", exc)
                grouped = False
                continue
            ids = []
            commits: list = []
            for _name, entries in answer or ():
                for entry_id, fields in entries:
                    ids.append(entry_id)
                    if b"m" not in fields:
                        self._control(fields.get(b"c", b"{}"))
                    else:
                        received = self._receive(fields[b"m"], commits, fields.get(b"w"))
                        self._check_gap(fields.get(b"w"), fields.get(b"c"), received)
            if not ids:
                continue
            if commits:  # committed with these deliveries: a survivor skips them (inherit.py)
                stream_mark(self.broker, self.node_id, ids[-1])
            await settle(commits, lambda n: self.count_dropped_here("store_unavailable", n))
            try:
                pipe = self.reader.pipeline(transaction=False)
                pipe.xack(stream, GROUP, *ids)
                if time.monotonic() - trimmed > 1.0:  # what we handled need not stay in Redis
                    trimmed = time.monotonic()
                    pipe.xtrim(stream, minid=ids[-1], approximate=True)
                await pipe.execute()
            except (RedisError, OSError) as exc:  # read again after a restart: at least once
                log.debug("forward stream not acknowledged (%s)", exc)

    def _check_gap(self, writer: bytes | None, sent: bytes | None, count: int) -> None:
        """Entries of a writer missing before this one (trimmed by the stream's cap, lost
        with a Redis restart): their messages are counted as dropped (`stream_gap`)."""
        if writer is None or sent is None:
            return
        sent_now = int(sent)
        before = self.stream_seen.get(writer)
        self.stream_seen[writer] = sent_now
        if before is not None and sent_now - count > before:
            lost = sent_now - count - before
            log.warning("%d forwarded messages from %s lost before read", lost, writer.decode())
            self.count_dropped_here("stream_gap", lost)

    def _receive(self, batch: bytes, commits: list, writer: bytes | None = None) -> int:
        broker = self.broker
        origin = writer.decode() if writer else ""
        try:
            messages = codec.decode_counted(batch)
        except Exception:
            log.exception("undecodable forwarded batch (%d bytes) dropped", len(batch))
            return 0
        for flags, message, groups, seq in messages:
            self.received += 1
            if flags & codec.RETAIN:
                broker.retained.set(message)
            if flags & codec.GROUPS:  # a dead node's group share, handed on (cluster/regroup.py)
                serve_here(broker, message, groups, commits)
                continue
            if flags & codec.TARGET:  # relayed for one session (data_plane.cluster.relay)
                for client_id, published_at in groups:
                    self.origins.mark(message, published_at, seq)  # (exactly.py)
                    self.sessions.targeted(message, client_id, commits)
                continue
            if flags & codec.DELIVER:  # its plain subscribers here, and the groups given to us
                self.origins.mark(message, origin, seq)  # (exactly.py)
                published = broker.route(
                    message, lambda group, g=groups: (group.topic_filter, group.name) in g
                )
                if published.commits:
                    commits.extend(published.commits)
        return len(messages)

    def _control(self, data: bytes) -> None:
        try:
            self.sessions.on_control(json.loads(data))
        except Exception:
            log.exception("control message not handled: %r", data[:200])

    def _count_dropped(self, tenant: str, count: int) -> None:
        self.broker.stats[tenant].dropped += count

    def count_dropped_here(self, reason: str, count: int) -> None:
        """Messages this node could not keep for its sessions (e.g. the database refused)."""
        self.dropped[reason] = self.dropped.get(reason, 0) + count

    # -- /metrics -------------------------------------------------------------------------

    def metrics(self) -> Iterator[Any]:
        nodes = GaugeMetricFamily(
            "mqtt_cluster_nodes", "Live nodes of the broker cluster, this one included"
        )
        nodes.add_metric([], 1 + len(self.alive))
        member = GaugeMetricFamily(
            "mqtt_cluster_node",
            "One per live node of the cluster (1: this process)",
            labels=["node", "host", "pid"],
        )
        for info in self.members():
            member.add_metric(
                [info["node"], str(info.get("host", "")), str(info.get("pid", ""))],
                1 if info is self.info else 0,
            )
        bus = GaugeMetricFamily("mqtt_cluster_bus_up", "1 while the cluster bus (Redis) answers")
        bus.add_metric([], 1 if self.bus_up else 0)
        routes = GaugeMetricFamily(
            "mqtt_cluster_remote_routes", "Routes of other nodes in this node's route table"
        )
        routes.add_metric([], len(self.table))
        forwarded = CounterMetricFamily(
            "mqtt_cluster_forwarded_messages", "Messages forwarded to another node (per node)"
        )
        forwarded.add_metric([], self.forwarder.forwarded)
        batches = CounterMetricFamily(
            "mqtt_cluster_forward_batches", "Stream entries written (each a batch of messages)"
        )
        batches.add_metric([], self.forwarder.batches)
        received = CounterMetricFamily(
            "mqtt_cluster_received_messages", "Messages other nodes forwarded to this one"
        )
        received.add_metric([], self.received)
        dropped = CounterMetricFamily(
            "mqtt_cluster_forward_dropped",
            "Messages not forwarded or not kept, by reason (bus_unavailable, backlog, store_unavailable, stream_gap, session_gone)",
            labels=["reason"],
        )
        for reason in ("bus_unavailable", "backlog"):
            dropped.add_metric([reason], self.forwarder.dropped[reason])
        for reason, count in self.dropped.items():  # e.g. store_unavailable, stream_trimmed
            dropped.add_metric([reason], count)
        refused = CounterMetricFamily(
            "mqtt_cluster_refused_connections",
            "Connections refused (0x88) while this node was cut off from the cluster bus",
        )
        refused.add_metric([], self.refused)
        takeovers = CounterMetricFamily(
            "mqtt_cluster_session_takeovers",
            "Sessions taken over between nodes: `taken` from another node, `released` to one",
            labels=["direction"],
        )
        takeovers.add_metric(["taken"], self.sessions.takeovers)
        takeovers.add_metric(["released"], self.sessions.released)
        takeovers.add_metric(["restored"], self.sessions.brought)
        takeovers.add_metric(["adopted"], self.sessions.adopted)
        wills = CounterMetricFamily(
            "mqtt_cluster_dead_node_wills",
            "Wills of dead nodes' clients (not kept in Postgres) published by this node",
        )
        wills.add_metric([], self.wills.published)
        relayed = CounterMetricFamily(
            "mqtt_cluster_relayed_messages",
            "Messages relays here sent on to the node a session moved to (cluster/relay.py)",
        )
        relayed.add_metric([], self.sessions.relayed)
        resubscribed = CounterMetricFamily(
            "mqtt_cluster_route_channel_resubscribed",
            "Times the route channel was lost (Redis restarted, output-buffer limit) and taken up",
        )
        resubscribed.add_metric([], self.resubscribed)
        yield from (nodes, member, bus, routes, forwarded, batches, received, dropped, refused)
        yield from (takeovers, resubscribed, wills, relayed)

"""What a survivor does when a node dies: nothing acknowledged for its persistent sessions lost.

The forward streams are read through a consumer group (`GROUP`): a node acknowledges (XACK) an
entry only once what it delivered from it to persistent sessions is committed to Postgres, so
the stream of a node that died holds exactly what it may not have delivered — entries it read
but did not acknowledge (its pending list) and entries it never read. Publishers keep
forwarding to a dead node (`Membership.dying`) until a survivor takes its place, so those
messages pile up in its stream too, instead of matching no route at all.

The survivor that takes the node's purge lock (`Membership._purge`, which hands the dead node to
`Inheritor.take_place`) first publishes the wills of its clients not kept in Postgres
(data_plane.cluster.wills), then, holding its own route lock so that none of its route changes
reaches the others meanwhile:

1. adopts the dead node's persistent sessions from Postgres (their ownership keys name the dead
   node, or nobody): subscriptions, queues, in-flight deliveries; their wills are scheduled
   after their delay (the clients lost their connections when the node died) unless they
   resume first (`SessionClaims.adopt`);
2. drains the dead node's stream into those sessions only (XAUTOCLAIM of the dead consumer's
   pending entries, then XREADGROUP of the unread ones), waiting for the Postgres commits
   before XACK: every QoS 1/2 message a publisher got its PUBACK for is now in a session
   queue, once. A node records, in the very transaction that commits the deliveries of a
   batch of entries it read, the last of those entries (`tenants_mqttstreammark`, a row per
   node: `stream_mark`); the survivor skips the entries at or below the dead node's mark —
   their deliveries are in the sessions it just loaded from Postgres — and delivers the rest
   (read but not committed, or never read). Exact, because the mark and the deliveries it
   covers commit or fail together, and entries are read in id order;
3. in one script (`REPLACE`): writes its own route changes (the adopted sessions'
   subscriptions), deletes the dead node's routes and membership, and publishes one message
   that makes every node switch from the dead node to itself at once — a publish goes to the
   dead node's stream before the switch and to the survivor after it, never to neither and
   never to both;
4. after half a heartbeat (forwards already buffered for the dead node when the switch came),
   drains the stream again, then deletes it and the dead node's mark.

Shared-group messages given to the dead node are handed to a surviving member of each group
(data_plane.cluster.regroup), once.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError, ResponseError

from data_plane.broker.ports import Commit
from data_plane.cluster import codec
from data_plane.cluster.bus import Bus, Drop, Peers
from data_plane.cluster.deliver import deliver_to
from data_plane.cluster.exactly import Origins, mark, routed
from data_plane.cluster.forward import Forwarder
from data_plane.cluster.own_routes import OwnRoutes
from data_plane.cluster.regroup import reassign
from data_plane.cluster.routes import APPLY_OPS_LUA, RouteTable
from data_plane.cluster.sessions import SessionClaims
from data_plane.cluster.wills import WillRegistry

if TYPE_CHECKING:
    from data_plane.broker.broker import Broker

log = logging.getLogger("data_plane.cluster")

GROUP = "deliver"  # the consumer group every forward stream is read through
DRAIN_COUNT = 500  # stream entries per read while draining a dead node's stream

# KEYS: our route set, our version, the dead node's route set, its version, the members set,
# its tombstone (what it finds if it was only stalled and comes back: see `counted_dead`).
# ARGV: channel, our id, the dead node's id, then "+key" / "-key" ops of our routes.
# Returns our new version, or -1 when our version key is gone (our routes are rewritten by the
# next beat; the dead node is announced as having left).
REPLACE = (
    APPLY_OPS_LUA
    + """
local version = -1
local added, removed = {}, {}
if redis.call('EXISTS', KEYS[2]) == 1 then
  version = redis.call('INCR', KEYS[2])
  added, removed = apply_ops(KEYS[1], 4)
end
redis.call('DEL', KEYS[3], KEYS[4])
redis.call('SREM', KEYS[5], ARGV[3])
redis.call('SET', KEYS[6], ARGV[2], 'EX', 86400)
if version == -1 then
  redis.call('PUBLISH', ARGV[1], cjson.encode({node = ARGV[3], left = true}))
else
  redis.call('PUBLISH', ARGV[1], cjson.encode({node = ARGV[2], version = version,
    added = added, removed = removed, replaces = ARGV[3]}))
end
return version
"""
)


async def ensure_group(redis: Any, stream: str) -> None:
    """The stream's consumer group, from its first entry (the stream is made if need be)."""
    try:
        await redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
    except ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


async def settle(commits: list[Commit], on_fail: Callable[[int], object]) -> None:
    """Wait for the durable copies of what was delivered; `on_fail(count)` for any refused."""
    if not commits:
        return
    results = await asyncio.gather(*commits, return_exceptions=True)
    failed = sum(1 for result in results if isinstance(result, BaseException))
    if failed:
        on_fail(failed)


def _store(broker: Broker | None) -> Any:
    """The session store (Postgres) under the broker's persistence, if it keeps stream marks."""
    store = getattr(broker and broker.persistence, "store", None)
    return store if hasattr(store, "stream_mark") else None


def stream_mark(broker: Broker, node: str, entry: bytes | str) -> None:
    """`node` delivered its stream up to `entry`: recorded with those deliveries' commit."""
    store = _store(broker)
    if store is not None:
        store.stream_mark(node, entry.decode() if isinstance(entry, bytes) else entry)


async def forget_stream_mark(broker: Broker | None, node: str) -> None:
    store = _store(broker)
    if store is None:
        return
    try:
        # Bounded: at a stop, a row lock held by a slow commit must not hold the process.
        await asyncio.wait_for(store.forget_stream_mark(node), 2.0)
    except Exception as exc:  # a stale row only: the next survivor of that id overwrites it
        log.warning("stream mark of %s not deleted: %s", node, exc)


def _entry(entry_id: bytes | str) -> tuple[int, int]:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    ms, _, seq = text.partition("-")
    return int(ms), int(seq or 0)


class Inheritor:
    """What a survivor needs to take a dead node's place (see the module's docstring): the rooms
    it drives, given at composition (data_plane.cluster.node). `membership` calls `take_place`
    once it holds the dead node's purge lock."""

    broker: Broker  # `attach`, at the node's start

    def __init__(
        self,
        bus: Bus,
        *,
        table: RouteTable,
        peers: Peers,
        forwarder: Forwarder,
        origins: Origins,
        own_routes: OwnRoutes,
        sessions: SessionClaims,
        wills: WillRegistry,
        drop: Drop,
    ) -> None:
        self.bus = bus
        self.table, self.peers, self.forwarder = table, peers, forwarder
        self.origins, self.own_routes, self.sessions, self.wills = (
            origins,
            own_routes,
            sessions,
            wills,
        )
        self.drop = drop

    def attach(self, broker: Broker) -> None:
        self.broker = broker

    async def take_place(self, dead: str, switched: Callable[[str], None]) -> None:
        """Run an `Inheritance` (`switched(dead)` once every node switched from it to this one),
        logging (not raising) a failure: the purge lock expires and the next beat of some
        survivor tries again."""
        try:
            await Inheritance(self, dead, switched).run()
        except (RedisError, OSError) as exc:
            log.warning("could not take the place of dead node %s: %s", dead, exc)
        except Exception:
            log.exception("taking the place of dead node %s failed", dead)


class Inheritance:
    """A survivor taking the place of one dead node (see the module's docstring)."""

    def __init__(self, heir: Inheritor, dead: str, switched: Callable[[str], None]) -> None:
        self.heir = heir
        self.dead = dead
        self.switched = switched
        self.stream = heir.bus.keys.stream(dead)
        self.adopted: set[tuple[str, str]] = set()
        self.drained = 0  # messages delivered from the dead node's stream
        self.skipped = 0  # entries the dead node had committed (at or below its mark)
        self.mark: tuple[int, int] | None = None
        self.replace = heir.bus.redis.register_script(REPLACE)

    async def run(self) -> None:
        try:
            await self._run()
        finally:  # the adopted sessions need no more watching for duplicates (exactly.py)
            self.heir.origins.close(self.adopted)

    async def _run(self) -> None:
        heir, bus = self.heir, self.heir.bus
        await heir.wills.publish_for(self.dead)  # its clients' wills not in Postgres
        own = heir.own_routes
        async with own.lock:  # our route changes reach the others in step 3 only
            self.adopted = await heir.sessions.adopt()
            store = _store(heir.broker)
            if store is not None:  # what the dead node committed is in the adopted sessions
                mark = await store.stream_mark_of(self.dead)
                self.mark = _entry(mark) if mark else None
            await self._drain()
            pending, own.pending = own.pending, {}
            ops = [("+" if added else "-") + key for key, added in pending.items()]
            keys = bus.keys
            version = await self.replace(
                keys=[
                    keys.routes(bus.node_id),
                    keys.version(bus.node_id),
                    keys.routes(self.dead),
                    keys.version(self.dead),
                    keys.members,
                    keys.dead(self.dead),
                ],
                args=[keys.channel, bus.node_id, self.dead, *ops],
            )
            if version == -1:
                own.synced = False  # the beat rewrites our whole set
            else:
                own.version = version
        self.switched(self.dead)
        await asyncio.sleep(bus.heartbeat / 2)  # forwards buffered before the switch
        await self._drain()
        await bus.redis.delete(self.stream)
        await forget_stream_mark(heir.broker, self.dead)
        log.info(
            "took the place of dead node %s: %d persistent sessions, %d messages from its"
            " stream (%d entries it had committed skipped)",
            self.dead,
            len(self.adopted),
            self.drained,
            self.skipped,
        )

    async def _drain(self) -> None:
        """Everything in the dead node's stream not acknowledged yet, into the adopted
        sessions; acknowledged once committed."""
        redis, me = self.heir.bus.redis, self.heir.bus.node_id
        await ensure_group(redis, self.stream)
        start = "0-0"
        while True:  # what the dead node read but did not acknowledge
            answer = await redis.xautoclaim(
                self.stream, GROUP, me, 0, start_id=start, count=DRAIN_COUNT
            )
            start, entries = answer[0], answer[1]
            await self._handle(entries)
            if not entries or start in (b"0-0", "0-0"):
                break
        while True:  # what it never read
            answer = await redis.xreadgroup(GROUP, me, {self.stream: ">"}, count=DRAIN_COUNT)
            entries = [entry for _name, part in answer or () for entry in part]
            if not entries:
                break
            await self._handle(entries)

    async def _handle(self, entries: list[codec.StreamEntry]) -> None:
        heir = self.heir
        router = heir.broker.router
        commits: list[Commit] = []
        ids = []
        for entry_id, fields in entries:
            ids.append(entry_id)
            batch = (fields or {}).get(b"m")
            if not batch:
                continue  # control messages were for the dead node
            if self.mark is not None and _entry(entry_id) <= self.mark:
                self.skipped += 1  # its deliveries were committed: the sessions have them
                continue
            writer = (fields.get(b"w") or b"").decode()
            for flags, message, groups, seq in codec.decode_counted(batch):
                if flags & codec.DELIVER:  # the sessions decide, as for any delivery
                    mark(message, writer, seq)  # (exactly.py)
                    self.drained += deliver_to(router, message, self.adopted, commits)
                    routed(message)
                    if groups:  # the shared groups it was to serve: to a survivor (regroup.py)
                        self.drained += reassign(
                            message,
                            groups,
                            seq,
                            commits,
                            broker=heir.broker,
                            table=heir.table,
                            peers=heir.peers,
                            forwarder=heir.forwarder,
                            drop=heir.drop,
                        )
        await settle(commits, lambda n: heir.drop("store_unavailable", n))
        if ids:
            await heir.bus.redis.xack(self.stream, GROUP, *ids)

"""One session per client id across the cluster: the node a client connects to claims the id,
and the node that held it lets it go (its connection gets DISCONNECT 0x8E).

Ownership: `Keys.owner(tenant, client id)` → node id, written by every CONNECT with one
`SET … GET` (Redis ≥ 6.2): the answer is the previous owner, and Redis orders two CONNECTs of
one client id at two nodes — the SO_REUSEPORT race — so the later one always learns of the
earlier one. When the previous owner is another live node, the claimer sends it `takeover` on
its stream and waits (at most `TAKEOVER_WAIT`) for `released`:

- the owner holds the session: its connection is taken over as locally (0x8E; its will
  scheduled with its delay: with clean start 1 the session ends and the will goes at once,
  with clean start 0 it continues and the will is discarded, MQTT 5 §3.1.2.5); the session
  leaves the owner's memory (its subscriptions leave the owner's routes unless other local
  subscribers need them, once a relay has bridged the moment until the claimer's routes stand:
  data_plane.cluster.relay) and a persistent one is saved; the owner answers `released` only once
  the database holds all of it (record, queue, in-flight states, acknowledgements: the store's
  pending group commit is awaited);
- the owner is itself still in its CONNECT for that id (its own claim came first but its
  answer had not arrived, or its session is open but its first save still stands before its
  CONNACK): the takeover waits for that CONNECT to open its session and send its CONNACK, then
  takes it over — the earlier client gets CONNACK then 0x8E, one session remains. (Taken over
  before its CONNACK, the connection would close with nothing written, its CONNACK and
  DISCONNECT still held: the client sees a lost connection, reconnects and takes the session
  back from the winner.)

The claimer, when the client asked to continue its session (clean start 0) and this node does
not hold it, restores it from Postgres (`SessionPersistence.restore_one`) before its CONNACK:
session present 1, its subscriptions (routes added here), its queue and in-flight deliveries
(QoS 2 ones resent with their packet ids: exactly once). A session whose owner is dead needs no
answer: it is restored at once.

At start-up a node restores from Postgres only the persistent sessions it can own
(`claim_restored`: no owner yet, or a dead one), in one script per 500 sessions. When a node
dies, the survivor that takes its place adopts its persistent sessions the same way (`adopt`,
see data_plane.cluster.inherit); a CONNECT elsewhere meanwhile waits for the adoption, then
takes the session over. A node that was only stalled past its TTL and comes back finds the
survivor's tombstone (`counted_dead`): its clients go (0x8E) and reconnect anywhere.

Bounds: a takeover waits at most `TAKEOVER_WAIT` for `released` (a node that does not answer
in time keeps a copy until it notices, the known cost of not using consensus).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from data_plane.broker.message import Message
from data_plane.broker.ports import Commit
from data_plane.broker.session import Session
from data_plane.cluster.bus import Bus, Drop, Peers
from data_plane.cluster.deliver import deliver_to
from data_plane.cluster.departed import Departed
from data_plane.cluster.exactly import Origin, Origins, mark, routed
from data_plane.cluster.relay import Relays

if TYPE_CHECKING:
    from data_plane.broker.broker import Broker

log = logging.getLogger("data_plane.cluster")

TAKEOVER_WAIT = 2.0  # seconds a CONNECT waits for the previous node to let the session go
RELEASE_STEP = 0.005  # seconds between looks for the CONNACK of a CONNECT that lost a race
RELEASE_WAIT = TAKEOVER_WAIT  # at most this long (the claimer waits no longer for `released`)
OWNER_TTL = 7 * 86400  # seconds an ownership record outlives the last CONNECT that wrote it


# KEYS: ownership keys. ARGV: this node, the TTL, then the live nodes. Each key without an owner,
# or whose owner is not live, becomes this node's; returns every key's owner after the call.
CLAIM_RESTORED = """
local live = {}
for i = 3, #ARGV do live[ARGV[i]] = true end
local owners = {}
for i, key in ipairs(KEYS) do
  local owner = redis.call('GET', key)
  if not owner or (owner ~= ARGV[1] and not live[owner]) then
    redis.call('SET', key, ARGV[1], 'EX', ARGV[2])
    owner = ARGV[1]
  end
  owners[i] = owner
end
return owners
"""
CLAIM_CHUNK = 500  # ownership keys per script call


@dataclass
class _Claim:
    lost_to: tuple[str, str, bool] | None = None  # (node, request id, clean start) that won


class SessionClaims:
    """One session per client id across the cluster (see the module's docstring)."""

    broker: Broker  # `attach`, at the node's start

    def __init__(
        self,
        bus: Bus,
        *,
        peers: Peers,
        departed: Departed,
        origins: Origins,
        relays: Relays,
        drop: Drop,
    ) -> None:
        self.bus = bus
        self.peers = peers  # whether the previous owner lives
        self.departed = departed  # sessions that left lately (their relays)
        self.origins = origins  # sessions moving here are watched for duplicates
        self.relays = relays  # a relay stands in for a session that leaves
        self.drop = drop
        self.claiming: dict[tuple[str, str], _Claim] = {}  # our CONNECTs between SET and open
        self.waiting: dict[str, asyncio.Future[None]] = {}  # request id -> its `released`
        self.takeovers = 0  # sessions this node took from another
        self.released = 0  # sessions this node gave up to another
        self.brought = 0  # persistent sessions restored here from the database at a CONNECT
        self.adopted = 0  # persistent sessions of dead nodes taken here
        self.relayed = 0  # messages relays here sent on to the node a session moved to
        # Relayed messages for sessions still being restored here (claiming): they wait.
        self.held: dict[tuple[str, str], list[tuple[Message, Origin | None]]] = {}

    def attach(self, broker: Broker) -> None:
        self.broker = broker

    def owner_key(self, tenant: str, client_id: str) -> str:
        return self.bus.keys.owner(tenant, client_id)

    async def claim(self, tenant: str, client_id: str, clean_start: bool) -> None:
        """Before a CONNECT opens its session: this node owns the client id from now on."""
        bus = self.bus
        key = (tenant, client_id)
        mine = _Claim()
        self.claiming[key] = mine
        self.departed.forget(key)  # it is here again: what reaches it here is its own
        came_from = None  # the live node this CONNECT takes the session over from
        try:
            try:
                previous = await bus.redis.set(
                    self.owner_key(tenant, client_id), bus.node_id, ex=OWNER_TTL, get=True
                )
            except (RedisError, OSError) as exc:
                log.warning("session ownership of %s/%s not recorded: %s", tenant, client_id, exc)
                return
            previous = previous.decode() if previous else None
            if previous and previous != bus.node_id and previous in self.peers.alive:
                came_from = previous
                if not clean_start:  # its relay and the publishers may both send us a message
                    self.origins.expect(key)  # (data_plane.cluster.exactly)
                await self._take_from(previous, tenant, client_id, clean_start)
            if not clean_start:  # the session continues here: bring it from the database
                await self._bring(tenant, client_id)
        finally:
            journey = self.broker.journey
            if journey is not None:  # its `connected` row names the node (or none: cleared)
                journey.arriving(tenant, client_id, came_from)
            if self.claiming.get(key) is mine:
                del self.claiming[key]
                self._deliver_held(key)
            self.origins.settled(key)
            if mine.lost_to is not None:  # a later CONNECT elsewhere won: once opened, go
                asyncio.get_running_loop().call_soon(  # (our CONNECT opens its session first)
                    self._release_once_acked, tenant, client_id, *mine.lost_to
                )

    def _release_once_acked(
        self,
        tenant: str,
        client_id: str,
        node: str,
        request: str,
        clean: bool,
        deadline: float | None = None,
    ) -> None:
        """Release to `node` once our CONNECT for the id has its CONNACK (a client must see
        CONNACK before DISCONNECT 0x8E, or it counts the connect as failed and retries it);
        the session's first save may stand between the two. At once when there is no such
        CONNECT; after RELEASE_WAIT at most (a CONNECT stuck that long is let go unanswered)."""
        loop = asyncio.get_running_loop()
        if deadline is None:
            deadline = loop.time() + RELEASE_WAIT
        session = self.broker.sessions.get((tenant, client_id))
        connection = session.connection if session is not None else None
        if connection is not None and not connection.acked and not connection.closing:
            if loop.time() < deadline:
                loop.call_later(
                    RELEASE_STEP,
                    self._release_once_acked,
                    *(tenant, client_id, node, request, clean, deadline),
                )
                return
            log.warning("CONNECT of %s/%s not answered before its takeover", tenant, client_id)
        self.release(tenant, client_id, node, request, clean)

    async def _bring(self, tenant: str, client_id: str) -> None:
        """The persistent session of a client id this node does not hold, restored from the
        database before its CONNACK (session present 1): the node that held it (taken over, or
        dead, or this one before a restart) saved it and committed its queue first."""
        broker = self.broker
        if broker.persistence is None or (tenant, client_id) in broker.sessions:
            return
        try:
            if await broker.persistence.restore_one(tenant, client_id) is not None:
                self.brought += 1
        except Exception as exc:  # the database did not answer: the session starts afresh
            log.warning("session %s/%s not restored: %s", tenant, client_id, exc)

    async def _take_from(self, node: str, tenant: str, client_id: str, clean: bool) -> None:
        request = uuid.uuid4().hex
        answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting[request] = answer
        body: dict[str, object] = {"op": "takeover", "tenant": tenant, "client_id": client_id}
        body.update({"from": self.bus.node_id, "id": request, "clean": clean})
        try:
            await self.bus.control(node, body)
            await asyncio.wait_for(answer, TAKEOVER_WAIT)
            self.takeovers += 1
        except (TimeoutError, RedisError, OSError) as exc:
            log.warning("node %s did not release %s/%s: %r", node, tenant, client_id, exc)
        finally:
            self.waiting.pop(request, None)

    async def claim_restored(self, keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
        """Of the persistent sessions (tenant, client id) in the database — every node that
        starts could restore them all — the ones this node may own: no owner yet, or a dead
        one. The others stay with the live nodes that hold them (the storage's `restore` skips
        them: no copy here, no write to their records)."""
        bus = self.bus
        script = bus.redis.register_script(CLAIM_RESTORED)
        live = [bus.node_id, *self.peers.alive]
        mine: set[tuple[str, str]] = set()
        for start in range(0, len(keys), CLAIM_CHUNK):
            chunk = keys[start : start + CLAIM_CHUNK]
            owners = await script(
                keys=[self.owner_key(tenant, client_id) for tenant, client_id in chunk],
                args=[bus.node_id, OWNER_TTL, *live],
            )
            for key, owner in zip(chunk, owners, strict=True):
                if owner.decode() == bus.node_id:
                    mine.add(key)
        if len(mine) < len(keys):
            log.info(
                "left %d persistent sessions to the nodes that hold them", len(keys) - len(mine)
            )
        return mine

    async def adopt(self) -> set[tuple[str, str]]:
        """A dead node's persistent sessions (their owner is not live, or none) from the
        database into this node, with their wills scheduled (data_plane.cluster.inherit).
        While they load, a CONNECT elsewhere for one of them waits, as for a CONNECT of ours
        (`claiming`): it takes the session over once it is here."""
        broker = self.broker
        if broker.persistence is None or not hasattr(broker.persistence, "adopt"):
            return set()
        mine: set[tuple[str, str]] = set()
        marks: dict[tuple[str, str], _Claim] = {}

        async def keep(keys: list[tuple[str, str]]) -> set[tuple[str, str]]:
            fresh = [key for key in keys if key not in broker.sessions]
            for key in fresh:
                self.departed.forget(key)
                if key not in self.claiming:
                    marks[key] = self.claiming[key] = _Claim()
            mine.update(await self.claim_restored(fresh))
            for key in mine:  # watched for duplicates while the node's place is taken
                self.origins.expect(key)  # (data_plane.cluster.exactly)
            return mine

        try:
            await broker.persistence.adopt(keep)
        finally:
            for key, mark in marks.items():
                if self.claiming.get(key) is mark:
                    del self.claiming[key]
                    self._deliver_held(key)
                if mark.lost_to is not None:
                    node, request, clean = mark.lost_to
                    self.release(*key, node, request, clean)
        self.adopted += len(mine)
        return mine

    def targeted(self, message: Message, client_id: str, commits: list[Commit]) -> None:
        """A message another node's relay sent for one session here (data_plane.cluster.relay)."""
        key = (message.tenant, client_id)
        broker = self.broker
        if key in self.claiming:  # being restored here: it waits for the session (and origin)
            self.held.setdefault(key, []).append((message, message.cluster_origin))
            return
        if deliver_to(broker.router, message, {key}, commits):
            return
        # Moved on from here lately: it follows (data_plane.cluster.departed).
        if key not in broker.sessions and self.departed.pass_on(message, client_id, commits):
            return
        self.drop("session_gone", 1)

    def _deliver_held(self, key: tuple[str, str]) -> None:
        held = self.held.pop(key, None)
        for message, origin in held or ():
            mark(message, *(origin or ("", 0)))
            if not deliver_to(self.broker.router, message, {key}, []):
                self.drop("session_gone", 1)
            routed(message)

    # -- what other nodes ask ---------------------------------------------------------------

    def on_control(self, body: dict[str, Any]) -> None:
        op = body.get("op")
        if op == "released":
            answer = self.waiting.get(body.get("id", ""))
            if answer is not None and not answer.done():
                answer.set_result(None)
        elif op == "takeover":
            key = (body["tenant"], body["client_id"])
            pending = self.claiming.get(key)
            if pending is not None:  # our CONNECT for it has not opened its session yet
                pending.lost_to = (body["from"], body["id"], bool(body.get("clean")))
                return
            # Opened but maybe not acknowledged yet (its first save): CONNACK first, then 0x8E.
            self._release_once_acked(*key, body["from"], body["id"], bool(body.get("clean")))

    def release(self, tenant: str, client_id: str, node: str, request: str, clean: bool) -> None:
        """Let `node` have the session: take it from its connection here, then hand it over."""
        broker = self.broker
        session = broker.sessions.get((tenant, client_id))
        dropped = None
        if session is not None:
            self.released += 1
            connection = session.connection
            if connection is not None:
                self._leaving(tenant, client_id, node)  # its `taken_over` row names `node`
                connection.taken_over()  # 0x8E, the will scheduled with its delay
            if broker.sessions.get(session.key) is session:  # (a clean one ends here too)
                if not clean and session.persist is not None:  # it continues at `node`
                    self.relays.stand_in(session, node)
                dropped = self._drop(session, clean)
        asyncio.get_running_loop().create_task(self._hand_over(node, request, dropped))

    async def _hand_over(self, node: str, request: str, saved: Any) -> None:
        """`released` once the database has all of the session (record, queue, in-flight
        states, acknowledgements): the claimer restores it from there."""
        try:
            if saved is not None:
                await saved
                await self.broker.persistence.store.flushed()  # type: ignore[union-attr]  # storage's SessionPersistence: `saved` came from it
        except Exception as exc:
            log.warning("session not saved before its hand-over to %s: %s", node, exc)
        await self._answer(node, {"op": "released", "id": request})

    def counted_dead(self) -> None:
        """This node was counted dead and a survivor took its place: every connection here
        goes (0x8E, no will: the survivor published it) and the persistent sessions leave
        memory without a write (the survivor holds them now)."""
        broker = self.broker
        log.warning("this node was counted dead: its %d sessions go", len(broker.sessions))
        for session in list(broker.sessions.values()):
            connection = session.connection
            if connection is not None:
                self._leaving(*session.key, "")  # taken by no node we know (journey_moves)
                connection.taken_over(with_will=False)  # (the survivor published it)
            if broker.sessions.get(session.key) is session:
                session.persist = None
                self._drop(session, False)

    def _leaving(self, tenant: str, client_id: str, node: str) -> None:
        journey = self.broker.journey
        if journey is not None:
            journey.leaving(tenant, client_id, node)

    def _drop(self, session: Session, clean: bool) -> Any:
        """A session leaves this node's memory (the database keeps a persistent one: never
        `forget` here, the claimer may be writing it already); returns the save to wait for
        (None when the session is not stored)."""
        broker = self.broker
        if session.will_handle is not None:
            session.will_handle.cancel()
            session.will_handle = None
            if clean and session.will is not None:  # the session ends: its will goes now
                broker.publish_will(session, session.will)
            session.will = session.will_due = None
        if session.expiry_handle is not None:
            session.expiry_handle.cancel()
            session.expiry_handle = None
        saved = None
        if session.persist is not None and broker.persistence is not None:
            # subscriptions kept; the will gone (published, or the session continues)
            saved = asyncio.ensure_future(broker.persistence.save(session, disconnected=True))
        session.persist = None  # nothing more of it is written from here
        broker.let_go(session)  # out of this node's routes and maps only
        return saved

    async def _answer(self, node: str, body: dict[str, Any]) -> None:
        try:
            await self.bus.control(node, body)
        except (RedisError, OSError) as exc:
            log.warning("could not answer node %s: %s", node, exc)

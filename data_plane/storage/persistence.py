"""Persistent sessions, mirrored to Postgres through the `SessionStore`.

A session is persistent when its client asked for it (3.1.1 clean session 0, 5.0 session expiry
> 0) and the tenant is known to the database. For such a session every QoS 1/2 delivery gets a
sequence number and is appended to its queue (group-committed); the publisher's PUBACK/PUBREC
waits for that commit (`Broker.publish` returns the commits). Acknowledged or dropped deliveries are
deleted. At start-up every live session is restored: subscriptions into the router, queue into
memory, expiry timers re-armed — so a kill -9 loses nothing that was acknowledged.

QoS 2 stays exactly once across a crash: a QoS 2 delivery's packet id is recorded when sent,
PUBREL goes out only once the client's PUBREC is committed, and on restart those come back as
in flight (PUBLISH resent with DUP and the same id, or PUBREL). Inbound, the client's held QoS 2
packet ids are committed with the message copies, and released before PUBCOMP.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any

from common.contracts import tables
from common.mqtt.packets import Subscription
from data_plane.broker.broker import Broker
from data_plane.broker.groups import ALWAYS, Holder
from data_plane.broker.limits import NEVER_EXPIRES
from data_plane.broker.message import Message
from data_plane.broker.session import (
    AWAIT_PUBACK,
    AWAIT_PUBCOMP,
    AWAIT_PUBREC,
    Delivery,
    Inflight,
    Session,
    SubscriptionState,
)
from data_plane.storage import group_records
from data_plane.storage.queue_records import RECEIVED, SENT, QueuedMessage
from data_plane.storage.session_store import SessionStore

log = logging.getLogger(__name__)


def _wall(monotonic_deadline: float | None) -> datetime | None:
    if monotonic_deadline is None:
        return None
    return datetime.now(UTC) + timedelta(seconds=monotonic_deadline - time.monotonic())


def _monotonic(wall: datetime | None) -> float | None:
    if wall is None:
        return None
    return time.monotonic() + (wall - datetime.now(UTC)).total_seconds()


class SessionPersistence:
    """The broker's `SessionStorage` port (data_plane.broker.ports): built on its store, handed
    to `Broker(..., Ports(persistence=...))`, then `restore(broker, ...)` before clients connect."""

    def __init__(self, store: SessionStore) -> None:
        self.broker: Broker | None = None  # the broker it serves: set by restore()
        self.store = store
        self._tasks: set[asyncio.Task[None]] = set()
        # Per session, the last write of its record still running: the next waits (`_in_order`).
        self._writing: dict[tuple[str, str], asyncio.Task[None]] = {}
        # A message fanned out to many persistent sessions spills to one object, not one each.
        self._spilled: tuple[Message | None, str] = (None, "")
        self._wills: list[tuple[Session, Message, float]] = []  # restored, not yet scheduled

    # -- which sessions -------------------------------------------------------------------

    def attach(self, session: Session) -> None:
        persistent = session.tenant_id is not None and session.expiry_interval > 0
        session.persist = self.persist if persistent else None
        session.durable = self if persistent else None

    # -- deliveries -----------------------------------------------------------------------

    def persist(self, session: Session, delivery: Delivery) -> asyncio.Future[None]:
        """Append the delivery to the session's durable queue; returns the commit."""
        session.next_seq += 1
        delivery.seq = session.next_seq
        message = delivery.message
        object_key = ""
        if self.store.spills(len(message.payload)):
            spilled, object_key = self._spilled
            if spilled is not message:
                object_key = self.store.new_object_key(session.tenant_id)  # type: ignore[arg-type]  # persistent: it has a tenant id (attach)
                self._spilled = (message, object_key)
        future = self.store.enqueue(
            session.tenant_id,  # type: ignore[arg-type]  # persistent: it has a tenant id (attach)
            session.client_id,
            QueuedMessage(
                seq=delivery.seq,
                topic=message.topic,
                payload=message.payload,
                qos=delivery.qos,
                retain=delivery.retain,
                properties=_jsonable(message.properties),
                expires_at=_wall(message.expires_at),
                object_key=object_key,
            ),
        )
        return future

    def sent(self, session: Session, delivery: Delivery, packet_id: int) -> None:
        """A QoS 2 delivery went out with this packet id: a restart resends it with the same."""
        future = self.store.mark(
            session.tenant_id,  # type: ignore[arg-type]  # persistent: it has a tenant id (attach)
            session.client_id,
            delivery.seq,  # type: ignore[arg-type]  # persisted: it has a seq
            packet_id,
            SENT,
        )
        future.add_done_callback(_log_failure)

    def released(
        self, session: Session, delivery: Delivery, packet_id: int
    ) -> asyncio.Future[None]:
        """The client sent PUBREC: commit that before PUBREL so a restart cannot resend PUBLISH."""
        return self.store.mark(
            session.tenant_id,  # type: ignore[arg-type]  # persistent: it has a tenant id (attach)
            session.client_id,
            delivery.seq,  # type: ignore[arg-type]  # persisted: it has a seq
            packet_id,
            RECEIVED,
        )

    def inbound_qos2(self, session: Session, packet_id: int, held: bool) -> asyncio.Future[None]:
        return self.store.inbound_qos2(session.tenant_id, session.client_id, packet_id, held)  # type: ignore[arg-type]  # persistent: it has a tenant id (attach)

    def settled(self, session: Session, delivery: Delivery) -> None:
        """Acknowledged by the client, or dropped: the durable copy goes."""
        if delivery.seq is None or session.tenant_id is None:
            return
        future = self.store.ack(session.tenant_id, session.client_id, delivery.seq)
        future.add_done_callback(_log_failure)

    # -- session records ------------------------------------------------------------------

    async def save(self, session: Session, *, disconnected: bool = False) -> None:
        expires_at = None
        if disconnected and session.expiry_interval != NEVER_EXPIRES:
            expires_at = datetime.now(UTC) + timedelta(seconds=session.expiry_interval)
        await self.store.save_session(
            session.tenant_id,  # type: ignore[arg-type]  # persistent: it has a tenant id (attach)
            session.client_id,
            expiry_interval=session.expiry_interval,
            subscriptions=[_subscription_record(s) for s in session.subscriptions.values()],
            will=_will_record(session),
            expires_at=expires_at,
        )

    def will_published(self, session: Session) -> None:
        """A delayed will went out: a restart must not publish it again."""
        self._spawn(self.store.save_will(session.tenant_id, session.client_id, None))  # type: ignore[arg-type]  # persistent: it has a tenant id (attach)

    def group_saved(self, holder: Holder) -> None:
        """A durable shared group's record (members, end) as it stands now."""
        session = holder.session
        write = group_records.save(
            self.store.pool,
            session.tenant_id,  # type: ignore[arg-type]  # persistent: it has a tenant id (attach)
            holder.name,
            holder.topic_filter,
            session.client_id,
            len(holder.group.members),
            holder.expires_at,
        )
        self._in_order(session, write)

    def group_deleted(self, holder: Holder) -> None:
        """The group ended: its record and messages go."""
        session = holder.session
        write = group_records.delete(self.store.pool, session.tenant_id, session.client_id)  # type: ignore[arg-type]  # persistent: it has a tenant id (attach)
        self._in_order(session, write)

    def save_later(self, session: Session, *, disconnected: bool = False) -> None:
        self._in_order(session, self.save(session, disconnected=disconnected))

    def forget(self, session: Session) -> None:
        """The session ended: its rows go. Only a session that was persistent has any (expiry 0
        from its CONNECT on never wrote one): a clean session's end costs Postgres nothing,
        where each had run a transaction of two DELETEs."""
        if session.tenant_id is not None and session.durable is not None:
            self._in_order(session, self.store.delete_session(session.tenant_id, session.client_id))

    def _in_order(self, session: Session, write: Awaitable[None]) -> None:
        """Run `write` (a coroutine on the session's record) once the writes of the same session
        queued before it are done. Side by side, a SUBSCRIBE's save and the DISCONNECT's right
        after it committed in either order, and when the first won the row said "connected" (no
        `expires_at`) for a session waiting offline; a save could outlive the delete after it."""
        key = session.key
        task = self._spawn(_after(self._writing.get(key), write))
        self._writing[key] = task
        task.add_done_callback(lambda done: self._written(key, done))

    def _written(self, key: tuple[str, str], task: asyncio.Task[None]) -> None:
        if self._writing.get(key) is task:
            del self._writing[key]

    def _spawn(self, coroutine: Coroutine[object, object, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_log_failure)
        return task

    async def drain(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    # -- start-up -------------------------------------------------------------------------

    async def restore(self, broker: Broker, tenant_slugs: dict[int, str], keep: Any = None) -> int:
        """Bring back into `broker` (given this object as its `sessions` port) every unexpired
        session with its subscriptions and queue. `keep` (async, [(tenant, client id)] -> the
        set to restore): in a cluster, only the sessions no other live node holds."""
        assert broker.persistence is self, "the broker was not built with this persistence"
        self.broker = broker
        restored = 0
        stored_sessions = [
            s for s in await self.store.live_sessions() if s.tenant_id in tenant_slugs
        ]
        if keep is not None:  # the cluster's say (data_plane.cluster.sessions.claim_restored)
            wanted = await keep([(tenant_slugs[s.tenant_id], s.client_id) for s in stored_sessions])
            stored_sessions = [
                s for s in stored_sessions if (tenant_slugs[s.tenant_id], s.client_id) in wanted
            ]
        for stored in stored_sessions:
            tenant = tenant_slugs[stored.tenant_id]
            session = await self._bring_back(broker, stored, tenant)
            if stored.will:
                self._wills.append((session, *_restore_will(stored.will, tenant, stored.client_id)))
            restored += 1
        return restored + await self._restore_groups(broker, tenant_slugs, keep)

    async def _restore_groups(self, broker: Broker, tenant_slugs: dict[int, str], keep: Any) -> int:
        """The durable shared groups with their queues, after their members' sessions."""
        stored = [
            g for g in await group_records.live(self.store.pool) if g.tenant_id in tenant_slugs
        ]
        if keep is not None:  # one node restores each, as each session
            wanted = await keep([(tenant_slugs[g.tenant_id], g.holder_id) for g in stored])
            stored = [g for g in stored if (tenant_slugs[g.tenant_id], g.holder_id) in wanted]
        for group in stored:
            tenant = tenant_slugs[group.tenant_id]
            session = Session(tenant, group.holder_id, max_queued=ALWAYS)
            session.tenant_id = group.tenant_id
            session.next_seq = group.last_seq
            await self._load_queue(session, tenant)
            broker.groups.restored(session, group.topic_filter, group.name, group.expires_at)
        return len(stored)

    async def _bring_back(self, broker: Broker, stored: Any, tenant: str) -> Session:
        """One stored session into `broker`: subscriptions routed, queue and in-flight
        deliveries in memory, its expiry armed (the stored will is the caller's)."""
        session = Session(tenant, stored.client_id, max_queued=10**9)
        session.tenant_id = stored.tenant_id
        session.expiry_interval = stored.expiry_interval
        session.next_seq = stored.last_seq
        session.inbound_qos2 = set(stored.inbound_qos2)
        broker.adopt(session)
        self.attach(session)
        broker.keep(session)
        for record in stored.subscriptions:
            broker.restore_subscription(
                session,
                Subscription(
                    record["filter"],
                    record["qos"],
                    record.get("nl", False),
                    record.get("rap", False),
                    record.get("rh", 0),
                ),
                record.get("id"),
            )
        await self._load_queue(session, tenant)
        if stored.expires_at is not None:
            remaining = (stored.expires_at - datetime.now(UTC)).total_seconds()
        elif session.expiry_interval != NEVER_EXPIRES:
            # Connected when the broker died: its expiry runs from now.
            remaining = session.expiry_interval
            self.save_later(session, disconnected=True)
        else:
            remaining = None
        if remaining is not None:
            broker.expire_later(session, max(0.0, remaining))
        return session

    async def _load_queue(self, session: Session, tenant: str) -> None:
        """`session`'s stored queue into memory: in flight what was (resent on reconnect)."""
        stored = await self.store.fetch(session.tenant_id, session.client_id, limit=ALWAYS)  # type: ignore[arg-type]  # persistent: it has a tenant id
        for queued in stored:
            message = Message(
                queued.topic,
                queued.payload,
                queued.qos,
                queued.retain,
                restore_properties(queued.properties),
                _monotonic(queued.expires_at),
                "",
                tenant,
            )
            delivery = Delivery(message, queued.qos, queued.retain, seq=queued.seq)
            if queued.packet_id and queued.state in (SENT, RECEIVED):
                # In flight when the broker stopped: resent on reconnect, same packet id.
                state = AWAIT_PUBACK if queued.qos == 1 else AWAIT_PUBREC
                if queued.state == RECEIVED:
                    state = AWAIT_PUBCOMP
                session.inflight[queued.packet_id] = Inflight(delivery, state)
            else:
                session.queue.append(delivery)

    async def restore_one(self, tenant: str, client_id: str) -> Session | None:
        """The stored session of (tenant slug, client id) into the broker, or None if there is
        none: a session another node of the cluster held, restored where its client comes back
        (data_plane.cluster.sessions). Its stored will is not scheduled: the new connection
        brings its own."""
        broker = self.broker
        stored = await self.store.load_session_of(tenant, client_id)
        if stored is None or broker is None or broker.sessions.get((tenant, client_id)):
            return None
        return await self._bring_back(broker, stored, tenant)

    async def adopt(self, keep: Any) -> int:
        """A dead node's persistent sessions into this broker (data_plane.cluster): every
        stored session `keep` hands over, with its will scheduled after its delay (the client
        lost its connection when the node died) unless it resumes the session first."""
        async with self.store.pool.connection() as conn:
            rows = await (await conn.execute(f"SELECT id, slug FROM {tables.TENANT}")).fetchall()
        adopted = await self.restore(self.broker, dict(rows), keep)  # type: ignore[arg-type]  # restore() set it
        self.release_wills()
        return adopted

    def release_wills(self) -> int:
        """Schedule the restored wills, once every subscription, the retained store and the
        hooks are back: a client connected when the broker died lost its connection then, so its
        will goes after its delay unless it resumes the session first."""
        wills, self._wills = self._wills, []
        broker: Broker = self.broker  # type: ignore[assignment]  # set by restore(), whose wills these are
        for session, will, delay in wills:
            if session.connection is None and broker.sessions.get(session.key) is session:
                broker.schedule_will(session, will, delay)
        return len(wills)

    async def purge_forever(self, interval: float = 60.0) -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                await self.store.purge_expired()
                await group_records.purge_expired(self.store.pool)
                await self.store.collect_orphans()
            except Exception as exc:
                log.warning("session purge failed: %s", exc)


def _subscription_record(state: SubscriptionState) -> dict[str, Any]:
    return {
        "filter": state.topic_filter,
        "qos": state.qos,
        "nl": state.no_local,
        "rap": state.retain_as_published,
        "rh": state.retain_handling,
        "id": state.subscription_id,
    }


def _will_record(session: Session) -> dict[str, Any] | None:
    will = session.will
    if will is None:
        return None
    return {
        "topic": will.topic,
        "payload": will.payload.hex(),
        "qos": will.qos,
        "retain": will.retain,
        "properties": _jsonable(will.properties),
        "delay": session.will_delay,
        "due": _wall(session.will_due).isoformat() if session.will_due is not None else None,  # type: ignore[union-attr]  # due: so is its wall time
    }


def _restore_will(record: dict[str, Any], tenant: str, client_id: str) -> tuple[Message, float]:
    """The stored will and the seconds until it is due."""
    will = Message.from_publish(
        tenant,
        client_id,
        record["topic"],
        bytes.fromhex(record["payload"]),
        record["qos"],
        record["retain"],
        restore_properties(record.get("properties", {})),
    )
    if record.get("due"):
        delay = (datetime.fromisoformat(record["due"]) - datetime.now(UTC)).total_seconds()
    else:
        delay = float(record.get("delay", 0))
    return will, max(0.0, delay)


def _jsonable(properties: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, object] = {}
    for key, value in properties.items():
        if isinstance(value, bytes):
            out[key] = {"b": value.hex()}
        elif key == "user_property":
            out[key] = [list(pair) for pair in value]
        else:
            out[key] = value
    return out


def restore_properties(properties: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, object] = {}
    for key, value in properties.items():
        if isinstance(value, dict) and "b" in value:
            out[key] = bytes.fromhex(value["b"])
        elif key == "user_property":
            out[key] = [tuple(pair) for pair in value]
        else:
            out[key] = value
    return out


async def _after(previous: asyncio.Task[None] | None, write: Awaitable[None]) -> None:
    if previous is not None:
        await asyncio.wait([previous])
    await write


def _log_failure(future: asyncio.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("session store write failed: %s", future.exception())

"""A client's session: subscriptions, outbound inflight window and queue, packet ids, inbound
QoS 2 state. It outlives its connection when the session is persistent.

Outbound flow: `deliver()` sends at once when the connection can take it (inflight below the
client's Receive Maximum, transport not paused), else queues — bounded by `max_queued`, QoS 0
dropped first. Acknowledgements free inflight slots and `pump()` sends what waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from common.mqtt.codec import encode_ack
from common.mqtt.packets import PacketType
from data_plane.broker.auth import Authorizer
from data_plane.broker.message import Message
from data_plane.broker.outgoing import encode_delivery
from data_plane.broker.ports import Client, Commit, Outlet, SessionStorage
from data_plane.broker.router import SharedGroup

AWAIT_PUBACK, AWAIT_PUBREC, AWAIT_PUBCOMP = 1, 2, 3


class Held(Protocol):
    """A publisher that stopped reading for this session (its connection): released here."""

    def unthrottle_by(self, session: Session) -> None: ...


@dataclass(slots=True)
class Delivery:
    message: Message
    qos: int
    retain: bool
    subscription_ids: tuple[int, ...] = ()
    group: SharedGroup | None = (
        None  # the SharedGroup it came through, to hand it on if this member leaves
    )
    seq: int | None = None  # position in the session's durable queue, when persisted


# The marker `hold_live` queues: what follows it waits for a replay to end.
HOLD = Delivery(Message("", b"", 1, False), 1, False)


@dataclass(slots=True)
class Inflight:
    delivery: Delivery
    state: int


@dataclass(slots=True)
class SubscriptionState:
    """What the session subscribed with, kept to restore and to answer retained on resubscribe."""

    topic_filter: str  # as sent, `$share/...` included
    qos: int
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0
    subscription_id: int | None = None


@dataclass(eq=False)  # sessions are identities: hashed and compared by identity
class Session:
    tenant: str
    client_id: str
    device: str = ""
    max_queued: int = 1000
    expiry_interval: int = 0
    subscriptions: dict[str, SubscriptionState] = field(default_factory=dict)
    inflight: OrderedDict[int, Inflight] = field(default_factory=OrderedDict)
    queue: deque[Delivery] = field(default_factory=deque)
    inbound_qos2: set[int] = field(default_factory=set)
    connection: Client | None = None
    next_packet_id: int = 1
    dropped: int = 0
    expiry_handle: asyncio.TimerHandle | None = None
    # The connected client's will, kept here so a persistent session stores it: after a crash the
    # restarted broker publishes it (client lost its connection) unless the client comes back
    # within the will delay. `will_due` is the monotonic publish time once scheduled.
    will: Message | None = None
    will_delay: int = 0
    will_due: float | None = None
    will_handle: asyncio.TimerHandle | None = None
    on_drop: Callable[[Session, Delivery, str], None] | None = None  # (…, cause)
    on_sent: Callable[[Session, Delivery, int], None] | None = None  # (…, size)
    # Publishers paused because this session's queue backed up (see `backs_up`), released
    # once it has drained to a quarter (`release_publishers`).
    blocked_publishers: dict[Held, None] = field(
        default_factory=dict
    )  # in the order they were held
    tenant_id: int | None = None  # set when the tenant lives in the database
    next_seq: int = 0  # last sequence number used in the durable queue
    queued_qos0: int = 0  # QoS 0 deliveries in `queue`
    # callable(session, delivery) -> commit future, for persistent sessions (storage layer)
    persist: Callable[[Session, Delivery], Commit] | None = None
    queue_qos0_offline: bool = False  # the tenant's setting: QoS 0 waits while offline
    durable: SessionStorage | None = None  # for persistent sessions
    # callable(topic) -> bool when the device's ACL may withhold some topics its subscriptions
    # match (Mosquitto's read semantics: judged per message, live and retained); else None.
    read_filter: Callable[[str], bool] | None = None
    # callable(delivery) -> bool, asked first of every delivery: False drops it unseen (the
    # cluster's duplicate window while the session has just moved here: cluster/exactly.py).
    screen: Callable[[Delivery], bool] | None = None
    # The device's authorizer and quota as of its last connection: a will is judged by them
    # when it goes out (None after a restart: then only the broker's own rules apply).
    acl: Authorizer | None = None
    quota: dict[str, int] | None = None
    # Held a publisher for its whole allowance without draining: it no longer holds anyone
    # (its queue fills to its limit and drops) until it has drained again.
    stalled: bool = False

    @property
    def key(self) -> tuple[str, str]:
        return (self.tenant, self.client_id)

    @property
    def connected(self) -> bool:
        return self.connection is not None and not self.connection.closing

    # -- outbound -------------------------------------------------------------------------

    def deliver(self, delivery: Delivery) -> Commit | None:
        """Send, queue or drop `delivery`; returns the commit of its durable copy (a future the
        publisher's acknowledgement waits for) when the session is persistent, else None."""
        if self.screen is not None and not self.screen(delivery):
            return None  # a second copy of what it already got (the cluster's move window)
        if self.read_filter is not None and not self.read_filter(delivery.message.topic):
            return None  # the device may not read this topic: withheld, as if not subscribed
        commit = None
        if delivery.qos and self.persist is not None and delivery.seq is None:
            commit = self.persist(self, delivery)
        self._hand_over(delivery)
        return commit

    def _hand_over(self, delivery: Delivery) -> None:
        conn = self.connection
        if conn is not None and not conn.closing and not conn.write_paused and not self.queue:
            # `_paced` only with an outbound quota: most tenants have none (a call per delivery).
            paced = conn.outbound_bucket is not None
            if delivery.qos == 0:
                if not conn.batch_full and not (paced and self._paced(conn, delivery)):
                    self._send(delivery, None)
                    return
                self._enqueue(delivery)
                return
            if len(self.inflight) < conn.client_receive_maximum and not (
                paced and self._paced(conn, delivery)
            ):
                self._send(delivery, self._allocate_id())
                return
        if (conn is None or conn.closing) and delivery.qos == 0:
            if self.queue_qos0_offline:
                self._enqueue(delivery, offline=True)
            else:
                self._drop(delivery, "offline_qos0")
            return
        self._enqueue(delivery)

    # QoS 0 ("at most once") waiting for a slow reader is capped far below the session limit:
    # keeping memory bounded matters more than keeping messages the sender may lose anyway.
    QOS0_QUEUE_LIMIT = 100

    def _enqueue(self, delivery: Delivery, *, offline: bool = False) -> None:
        # Offline, QoS 0 is bounded by the session's queue limit like the rest (tenant setting).
        if delivery.qos == 0:
            if self.queued_qos0 >= self.QOS0_QUEUE_LIMIT and not offline:
                self._drop(delivery, "queue_full")
                return
            self.queued_qos0 += 1
        if len(self.queue) >= self.max_queued:
            # Make room: the oldest QoS 0 first, else refuse the newcomer.
            for index, queued in enumerate(self.queue):
                if queued.qos == 0:
                    del self.queue[index]
                    self.queued_qos0 -= 1
                    self._drop(queued, "queue_full")
                    break
            else:
                if delivery.qos == 0:
                    self.queued_qos0 -= 1
                self._drop(delivery, "queue_full")
                return
        self.queue.append(delivery)

    def backs_up(self, delivery: Delivery) -> bool:
        """Whether `delivery`, just handed over, found this session's queue backed up: then its
        publisher should stop reading until the queue drains (back-pressure, bounded in time by
        the publisher's read gate, so a dead subscriber cannot stall it for long).

        QoS 1/2: the delivery waits at the end of a queue past half full. QoS 0: the queue or
        its QoS 0 part is past half its cap, the delivery queued or not (over the cap QoS 0 is
        dropped). Holding QoS 0 publishers too is what keeps a fan-in alive: without it, 100
        publishers flat out into one subscriber had the loop reading and dropping at ~300,000
        msg/s while delivering ~1,500 (Mosquitto, whose reads TCP slows, delivered ~100,000)."""
        if self.connection is None or self.stalled:  # offline: nobody drains it
            return False
        if delivery.qos == 0:
            return self._backed_up()
        queue = self.queue
        return bool(queue) and queue[-1] is delivery and len(queue) >= self.max_queued // 2

    def hold(self, publisher: Held) -> None:
        """`publisher` stopped reading for this session: release it once drained."""
        self.blocked_publishers[publisher] = None

    def withhold(self, may_read: Callable[[str], bool]) -> None:
        """Drop what waits in the queue on topics the device may not read: queued before its
        ACL was known (a session restored after a restart) or before the ACL changed."""
        if not self.queue:
            return
        kept: deque[Delivery] = deque()
        for delivery in self.queue:
            if may_read(delivery.message.topic):
                kept.append(delivery)
                continue
            if delivery.qos == 0:
                self.queued_qos0 -= 1
            self._drop(delivery, "acl")
        self.queue = kept

    def release_publishers(self) -> None:
        """Let held publishers read again, the longest held first, while this queue has room.

        Each one released reads what it held at once, and may back the queue up again: then it
        is held anew (behind the others) and the rest wait for the next drain. Releasing all at
        once overflowed the QoS 0 cap: the 100 publishers of a fan-in added a message each to a
        queue already at its hold mark. Offline or stalled, everyone goes."""
        # Swapped first: a publisher held anew while we release must stay held.
        waiting, self.blocked_publishers = deque(self.blocked_publishers), {}
        while waiting:
            if self.connection is not None and not self.stalled and self._backed_up():
                break
            waiting.popleft().unthrottle_by(self)
        if waiting:  # still held: ahead of those held anew
            self.blocked_publishers = {**dict.fromkeys(waiting), **self.blocked_publishers}

    def _backed_up(self) -> bool:
        return (
            self.queued_qos0 >= self.QOS0_QUEUE_LIMIT // 2
            or len(self.queue) >= self.max_queued // 2
        )

    def _drop(self, delivery: Delivery, cause: str) -> None:
        self.dropped += 1
        if self.on_drop:
            self.on_drop(self, delivery, cause)

    def pump(self) -> None:
        """Send queued deliveries while the window and the transport allow."""
        conn = self.connection
        if conn is None:
            return
        queue = self.queue
        now = time.monotonic()
        while queue and not conn.closing and not conn.write_paused:
            delivery = queue[0]
            if delivery is HOLD:
                break  # a replay's messages go first (`hold_live`)
            if delivery.message.expired(now):
                queue.popleft()
                if delivery.qos == 0:
                    self.queued_qos0 -= 1
                self._drop(delivery, "expired")
                continue
            if delivery.qos == 0:
                if conn.batch_full or self._paced(conn, delivery):
                    break
                queue.popleft()
                self.queued_qos0 -= 1
                self._send(delivery, None)
            elif len(self.inflight) < conn.client_receive_maximum:
                if self._paced(conn, delivery):
                    break  # the pacing timer pumps again
                queue.popleft()
                self._send(delivery, self._allocate_id())
            else:
                break
        if not queue:
            self.stalled = False  # drained: it may hold publishers again
        if (
            self.blocked_publishers
            and len(queue) <= self.max_queued // 4
            and self.queued_qos0 <= self.QOS0_QUEUE_LIMIT // 4
        ):
            self.release_publishers()

    @staticmethod
    def _paced(conn: Outlet, delivery: Delivery) -> bool:
        """The tenant's outbound bytes/s quota says wait (the connection re-pumps later)."""
        bucket = conn.outbound_bucket
        if bucket is None:
            return False
        wait = bucket.spend(len(delivery.message.payload))
        if wait:
            conn.pace(wait)
            return True
        return False

    def _allocate_id(self) -> int:
        packet_id = self.next_packet_id
        while packet_id in self.inflight:
            packet_id = packet_id % 65535 + 1
        self.next_packet_id = packet_id % 65535 + 1
        return packet_id

    def _send(self, delivery: Delivery, packet_id: int | None, dup: bool = False) -> None:
        conn: Outlet = self.connection  # type: ignore[assignment]  # sent only while connected
        message = delivery.message
        if packet_id is not None:
            self.inflight[packet_id] = Inflight(
                delivery, AWAIT_PUBACK if delivery.qos == 1 else AWAIT_PUBREC
            )
        wire = encode_delivery(conn, delivery, packet_id, dup)
        if wire is None:  # larger than the client accepts: skipped, as the spec says
            if packet_id is not None:
                del self.inflight[packet_id]
            self._drop(delivery, "too_large")
            return
        data, new_alias = wire
        conn.send(data)
        if new_alias is not None:
            conn.alias_sent(message.topic, new_alias)
        if delivery.qos == 2 and delivery.seq is not None and self.durable is not None:
            self.durable.sent(self, delivery, packet_id)  # type: ignore[arg-type]  # QoS 2: it has an id
        if self.on_sent:
            self.on_sent(self, delivery, len(message.payload))

    def resend_inflight(self) -> None:
        """After a reconnect: unacknowledged PUBLISHes again with DUP, then PUBRELs (in order)."""
        conn: Outlet = self.connection  # type: ignore[assignment]  # called once connected
        for packet_id, entry in list(self.inflight.items()):
            if entry.state == AWAIT_PUBCOMP:
                conn.send(encode_ack(PacketType.PUBREL, packet_id, 0, None, conn.protocol_version))
                continue
            wire = encode_delivery(conn, entry.delivery, packet_id, True)
            if wire is None:
                del self.inflight[packet_id]
                continue
            data, new_alias = wire
            conn.send(data)
            if new_alias is not None:
                conn.alias_sent(entry.delivery.message.topic, new_alias)

    # -- acknowledgements from the client -------------------------------------------------

    def puback(self, packet_id: int) -> Delivery | None:
        entry = self.inflight.get(packet_id)
        if entry is None or entry.state != AWAIT_PUBACK:
            return None
        del self.inflight[packet_id]
        # Once per QoS 1 delivery, and most often nothing waits: then only what `pump` would do
        # with nothing queued or held (a call and a clock read fewer; issue 34, see `acks`).
        if self.queue or self.blocked_publishers:
            self.pump()
        elif self.connection is not None:
            self.stalled = False
        return entry.delivery

    def pubrec(self, packet_id: int, failed: bool) -> Delivery | None:
        """The delivery that was awaiting this PUBREC (then PUBREL is due unless it failed)."""
        entry = self.inflight.get(packet_id)
        if entry is None or entry.state != AWAIT_PUBREC:
            return None
        if failed:
            del self.inflight[packet_id]
            self.pump()
        else:
            entry.state = AWAIT_PUBCOMP
        return entry.delivery

    def pubcomp(self, packet_id: int) -> Delivery | None:
        entry = self.inflight.get(packet_id)
        if entry is None or entry.state != AWAIT_PUBCOMP:
            return None
        del self.inflight[packet_id]
        self.pump()
        return entry.delivery

    def hold_live(self) -> None:
        """From now on deliveries wait in the queue, behind what is queued already, until
        `release_live`: a replay's messages go out first (`send_first`)."""
        self.queue.append(HOLD)

    def release_live(self) -> None:
        with contextlib.suppress(ValueError):  # (gone if the session's state was cleared)
            self.queue.remove(HOLD)
        self.pump()

    def withdraw(self, deliveries: list[Delivery]) -> list[Delivery]:
        """Those of these still queued, taken out unsent (a replay sends them from history)."""
        wanted = {id(d) for d in deliveries}
        taken = [d for d in self.queue if id(d) in wanted]
        self.queue = deque(d for d in self.queue if id(d) not in wanted)
        self.queued_qos0 -= len([d for d in taken if d.qos == 0])
        return taken

    def send_first(self, delivery: Delivery) -> bool:
        """Send a replayed delivery now, ahead of the queue held back for it, if the client
        can take it (Receive Maximum, writes not paused, the outbound rate); False: try again
        later."""
        conn = self.connection
        if conn is None or conn.closing or conn.write_paused or not self.queue:
            return False
        if self.queue[0] is not HOLD:  # what was queued before the replay goes first
            return False
        if delivery.qos and len(self.inflight) >= conn.client_receive_maximum:
            return False
        if conn.outbound_bucket is not None and self._paced(conn, delivery):
            return False  # the tenant's outbound rate: a replay is delivery like any other
        self._send(delivery, self._allocate_id() if delivery.qos else None)
        return True

    def take_queued(self) -> Delivery | None:
        """The oldest queued delivery, taken out unsent (a group's holder hands it on)."""
        if not self.queue:
            return None
        delivery = self.queue.popleft()
        if delivery.qos == 0:
            self.queued_qos0 -= 1
        return delivery

    def give_back(self, delivery: Delivery) -> None:
        """A delivery taken out comes back first in line (its member could not keep it)."""
        if delivery.qos == 0:
            self.queued_qos0 += 1
        self.queue.appendleft(delivery)

    def undelivered_shared(self) -> list[Delivery]:
        """Shared-subscription messages this session took but the client has not received."""
        pending = [
            e.delivery
            for e in self.inflight.values()
            if e.state != AWAIT_PUBCOMP and e.delivery.group is not None
        ]
        return pending + [d for d in self.queue if d.group is not None and d.qos]

    def clear_delivery_state(self) -> None:
        self.release_publishers()
        self.inflight.clear()
        self.queue.clear()
        self.queued_qos0 = 0
        self.inbound_qos2.clear()

"""Durable shared groups (issue 45): a `$share/{group}/{filter}` group keeps its messages while
it has no member (every member's session ended; a persistent member offline still takes its
turn into its session), and hands them to the next member, in publish order.

Each group in the router gets a `Holder`: a session of the broker's own, never connected, under
the client id `$group:{digest}` (`holder_id`; CONNECT refuses the prefix, `limits`). Where the
tenant lives in the database it is persistent like a client's session: each held QoS 1/2 message
is a row of its queue, group-committed, and the publisher's acknowledgement waits for that commit,
so nothing acknowledged is lost to a crash. QoS 0 is held while a drain runs, or while nobody is
online where the tenant keeps QoS 0 for offline sessions (`queue_qos0_offline`).

- While the holder keeps anything, or awaits what another node's holder kept (`awaiting`: the
  cluster's `handover`), `SharedGroup.pick` gives no member: a new message waits behind.
- A member online (it subscribed, or its client came back) starts the drain: a task that hands
  the held messages, oldest first, to connected members with room (at most `DRAIN_ROOM` waiting
  for each: their Receive Maximum and queue do the rest), giving the loop back between batches.
- A drained copy stays in the holder's rows (`lent`) until its member acknowledges it; a member
  that goes, or drops it, gives it back first in line. A crash in between repeats it (at least
  once), never loses it.
- Bounds, from the tenant's quota as its members' last CONNECT read it: `max_group_messages` and
  `max_group_bytes` (a message over them is refused: counted as dropped and as the quota's
  refusal), `group_retention` (a held message expires after it; a group left without members
  goes with its messages after it), `max_shared_groups` (SUBSCRIBE to one more: 0x97).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import random
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta

from common.mqtt.topics import SHARE_PREFIX, parse_shared
from data_plane.broker.limits import RESERVED_CLIENT_ID_PREFIX
from data_plane.broker.message import Message
from data_plane.broker.ports import Commit, GroupStorage, Ports
from data_plane.broker.router import Router, SharedGroup, Subscriber
from data_plane.broker.session import Delivery, Session

DRAIN_ROOM = 1000  # held messages handed to one member ahead of its acknowledgements
DRAIN_PAUSE = 0.005  # seconds the drain waits when no member has room
# What a group keeps when the quota does not say (the plans' defaults).
DEFAULTS = {"max_group_messages": 100_000, "max_group_bytes": 100 << 20, "group_retention": 86_400}
ALWAYS = 10**9  # the holder's own queue limit: the group's bounds are judged before it
REMOTE_LOOK = 1.0  # seconds between looks for members on other nodes, while it holds any
# A cluster's `hand_held`: a held message to a node where the group has members (its commit),
# or None when no node has one.
Remote = Callable[[Message, str, str], "Commit | None"]
SALT_BITS = 10  # (microseconds since 1970 << 10 stay within a BIGINT until 2255)


def holder_id(name: str, topic_filter: str) -> str:
    """The client id a group's queue is kept under: fits any table, taken by no client."""
    digest = hashlib.sha256(f"{name}\n{topic_filter}".encode()).hexdigest()[:40]
    return RESERVED_CLIENT_ID_PREFIX + digest


def member_copy(message: Message, group: SharedGroup, member: Subscriber) -> Delivery:
    """The copy of `message` for one member of a shared group."""
    ids = (member.subscription_id,) if member.subscription_id else ()
    retain = message.retain and member.retain_as_published
    return Delivery(message, min(message.qos, member.qos), retain, ids, group)


class Holder:
    """One group's keeper: its messages while nobody takes them, and those lent to members."""

    def __init__(
        self, tenant: str, group: SharedGroup, session: Session, groups: GroupQueues
    ) -> None:
        self.tenant = tenant
        self.group = group
        self.session = session
        self.groups = groups
        self.lent: dict[int, tuple[Message, Delivery]] = {}  # id(member's message) -> held copy
        self.bytes = sum(len(d.message.payload) for d in session.queue)
        self.limits = dict(DEFAULTS)
        self.keep_qos0 = False  # the tenant's `queue_qos0_offline`
        self.salt = random.getrandbits(SALT_BITS)  # this holder's low bits of its queue places
        self.expires_at: datetime | None = None  # while it has no members
        self.expiry: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None  # the drain, while it runs
        self.awaiting = False  # what other nodes kept comes first (data_plane.cluster.handover)
        session.queue_qos0_offline = True  # QoS 0 judged by `hold`, not by the session

    @property
    def name(self) -> str:
        return self.group.name

    @property
    def topic_filter(self) -> str:
        return self.group.topic_filter

    @property
    def depth(self) -> int:
        return len(self.session.queue) + len(self.lent)

    # -- messages in ----------------------------------------------------------------------

    def hold(self, message: Message) -> Commit | None:
        """Keep `message` for the group; the commit of its durable copy, if it has one."""
        groups, session = self.groups, self.session
        size = len(message.payload)
        if message.qos == 0 and not self.keep_qos0 and self.task is None:
            groups.dropped(session, Delivery(message, 0, message.retain), "offline_qos0")
            return None
        over = None
        if self.depth >= self.limits["max_group_messages"]:
            over = "group_messages"
        elif self.bytes + size > self.limits["max_group_bytes"]:
            over = "group_bytes"
        if over is not None:
            groups.quota_exceeded(self.tenant, over)
            groups.dropped(session, Delivery(message, message.qos, message.retain), "group_full")
            return None
        deadline = time.monotonic() + self.limits["group_retention"]
        if message.expires_at is None or message.expires_at > deadline:
            message = dataclasses.replace(message, expires_at=deadline)
        self.bytes += size
        session.next_seq = self.next_seq() - 1  # (persisting takes the one after it)
        commit = session.deliver(Delivery(message, message.qos, message.retain))
        self.drain()
        return commit

    def next_seq(self) -> int:
        """The next held message's place in the group's queue: the time in microseconds, then
        this holder's salt (`SALT_BITS`), past the last one. Two nodes whose members all left
        each hold the group under one client id: their rows must not take the same place
        (they would share it only in the same microsecond with the same salt, and the group
        commit's each-alone would refuse the one, not the batch), and a queue restored from
        both comes back in time order, so each publisher's order holds."""
        moment = (time.time_ns() // 1000) << SALT_BITS | self.salt
        return max(moment, self.session.next_seq + (1 << SALT_BITS))

    # -- messages out ---------------------------------------------------------------------

    def drain(self) -> None:
        """Hand what is held to the members online, in the background, if any is (in a
        cluster, to members on other nodes too: then it looks for them while it holds any)."""
        if self.task is None and self.session.queue and not self.awaiting:
            if self._online() or self.groups.remote is not None:
                self.task = asyncio.get_running_loop().create_task(self._drain())

    def _online(self) -> list[Subscriber]:
        return [m for m in self.group.members if m.session.connected]

    async def _drain(self) -> None:
        try:
            while self.session.queue and not self.awaiting:
                members = self._online()
                if members:
                    moved = self._move(members)
                elif self.groups.remote is not None:
                    moved = self.hand_away(self.groups.remote)
                    if moved < 0:  # no member anywhere: look again in a while
                        await asyncio.sleep(REMOTE_LOOK)
                        continue
                else:
                    return
                await asyncio.sleep(0 if moved else DRAIN_PAUSE)  # the loop is everyone's
        finally:
            self.task = None

    def hand_away(self, remote: Remote) -> int:
        """Hand held messages to the group's members on other nodes (no member here); how
        many went, -1 when no node has one. Each is settled once its copy is on the bus."""
        moved, now, session = 0, time.monotonic(), self.session
        while moved < DRAIN_ROOM:
            held = self._take_live(now)
            if held is None:
                break
            commit = remote(held.message, self.topic_filter, self.name)
            if commit is None:
                session.give_back(held)
                return moved or -1
            self.lent[id(held.message)] = (held.message, held)
            commit.add_done_callback(lambda done, held=held: self._on_bus(done, held))  # type: ignore[misc]  # (a default binds each its own)
            moved += 1
        return moved

    def handed_over(self, _: object = None) -> None:
        """What other nodes kept of the group has come (or was waited for long enough)."""
        self.awaiting = False
        self.drain()

    def _take_live(self, now: float) -> Delivery | None:
        """The oldest held message not past its expiry (the expired ones before it go)."""
        while (held := self.session.take_queued()) is not None and held.message.expired(now):
            self._gone(held, "expired")
        return held

    def _on_bus(self, done: asyncio.Future[None], held: Delivery) -> None:
        entry = self.lent.pop(id(held.message), None)
        if entry is None:  # the group ended meanwhile
            return
        if done.cancelled() or done.exception() is not None:
            self.session.give_back(held)  # the bus did not take it: kept, tried again
            self.drain()
        else:
            self._settle(held)

    def _move(self, members: list[Subscriber]) -> int:
        """Hand held messages to `members` as far as each has room; how many went."""
        moved, now, session = 0, time.monotonic(), self.session
        for member in members:
            target = member.session
            waiting = len(target.queue)  # (its queue refuses beyond `max_queued`)
            room = min(DRAIN_ROOM - waiting - len(target.inflight), target.max_queued - waiting)
            while room > 0:
                held = self._take_live(now)
                if held is None:
                    return moved
                if target.read_filter is not None and not target.read_filter(held.message.topic):
                    session.give_back(held)  # not this member's to read: another may
                    break
                self._lend(member, held)
                room -= 1
                moved += 1
        if not moved and session.queue:
            head = session.queue[0].message.topic
            if all(m.session.read_filter is not None and not m.session.read_filter(head)
                   for m in members):  # fmt: skip
                self._gone(session.take_queued(), "not_authorized")  # type: ignore[arg-type]  # queued: there is one
                moved = 1
        return moved

    def _lend(self, member: Subscriber, held: Delivery) -> None:
        message = held.message
        if "message_expiry_interval" not in message.properties:
            message = dataclasses.replace(message, expires_at=None)  # the retention is ours
        copy = member_copy(message, self.group, member)
        if copy.qos:  # held (its row, if it has one, kept) until the member acknowledges it
            self.lent[id(message)] = (message, held)
        else:
            self._settle(held)
        member.session.deliver(copy)

    def acked(self, delivery: Delivery) -> None:
        """A member acknowledged a copy: if it was lent, the held one goes."""
        entry = self.lent.pop(id(delivery.message), None)
        if entry is not None:
            self._settle(entry[1])

    def returned(self, delivery: Delivery) -> bool:
        """A member went, or its queue was full: a lent copy comes back first in line (True)."""
        entry = self.lent.pop(id(delivery.message), None)
        if entry is None:
            return False
        self.session.give_back(entry[1])
        self.drain()
        return True

    def _settle(self, held: Delivery) -> None:
        self.bytes -= len(held.message.payload)
        self.groups.settle(self.session, held)

    def _gone(self, held: Delivery, cause: str) -> None:
        self.bytes -= len(held.message.payload)
        self.groups.dropped(self.session, held, cause)

    # -- its life -------------------------------------------------------------------------

    def members_changed(self) -> None:
        """Members came or went: a group left without members goes after its retention."""
        if self.group.members:
            if self.expiry is not None:
                self.expiry.cancel()
                self.expiry = None
            self.expires_at = None
        elif self.expiry is None:
            self.expire_in(self.limits["group_retention"])
        self.groups.saved(self)

    def expire_in(self, seconds: float) -> None:
        self.expires_at = datetime.now(UTC) + timedelta(seconds=seconds)
        loop = asyncio.get_running_loop()
        self.expiry = loop.call_later(max(0.0, seconds), self.groups.expired, self)

    def clear(self) -> None:
        """The group ends: nothing held, nothing lent, no timer, no drain."""
        if self.expiry is not None:
            self.expiry.cancel()
        if self.task is not None:
            self.task.cancel()
        self.lent.clear()
        self.session.clear_delivery_state()


class GroupQueues:
    """The tenants' holders; the broker tells it of members, messages and acknowledgements."""

    def __init__(
        self,
        router: Router,
        ports: Ports,
        settle: Callable[[Session, Delivery], None],
        dropped: Callable[[Session, Delivery, str], None],
        quota_exceeded: Callable[[str, str], None],
    ) -> None:
        self.router = router
        self.storage: GroupStorage | None = ports.persistence  # where groups are kept
        # The cluster's `hand_held` (held messages to members on other nodes) and `take_group`
        # (what other nodes keep, first); None: one node.
        self.remote: Remote | None = ports.cluster.hand_held if ports.cluster else None
        self.take = ports.cluster.take_group if ports.cluster else None
        self.settle = settle  # the durable copy of a held message goes
        self.dropped = dropped  # counted, and its durable copy goes
        self.quota_exceeded = quota_exceeded
        self.holders: dict[str, dict[tuple[str, str], Holder]] = {}  # tenant -> (filter, name)

    def count(self, tenant: str) -> int:
        return len(self.holders.get(tenant, ()))

    def all(self) -> list[Holder]:
        return [h for held in self.holders.values() for h in held.values()]

    def find(self, tenant: str, name: str, topic_filter: str) -> Holder | None:
        return self.holders.get(tenant, {}).get((topic_filter, name))

    def over_cap(self, tenant: str, quota: Mapping[str, int], shared_filter: str) -> bool:
        """Whether a SUBSCRIBE to `shared_filter` would make one group more than the tenant
        may have (`max_shared_groups`)."""
        limit = quota.get("max_shared_groups")
        if limit is None or not shared_filter.startswith(SHARE_PREFIX):
            return False
        name, topic_filter = parse_shared(shared_filter)
        return self.find(tenant, name, topic_filter) is None and self.count(tenant) >= limit  # type: ignore[arg-type]  # shared: it has a name

    # -- members --------------------------------------------------------------------------

    def joined(self, session: Session, topic_filter: str, name: str) -> None:
        """`session` is a member of the group now (subscribed, or restored)."""
        holder = self.find(session.tenant, name, topic_filter)
        if holder is None:
            holder = self._new(session, topic_filter, name)
        if session.quota is not None:
            for key, default in DEFAULTS.items():
                holder.limits[key] = session.quota.get(key, default)
        holder.keep_qos0 = session.queue_qos0_offline
        holder.members_changed()
        if self.take is not None and len(holder.group.members) == 1 and not holder.awaiting:
            taking = self.take(session.tenant, topic_filter, name)
            if taking is not None:  # its first member here: what other nodes kept comes first
                holder.awaiting = True
                taking.add_done_callback(holder.handed_over)
        holder.drain()

    def left(self, tenant: str, topic_filter: str, name: str) -> None:
        holder = self.find(tenant, name, topic_filter)
        if holder is not None:
            holder.members_changed()

    def orphaned(self, deliveries: list[Delivery]) -> None:
        """A member ended with these undelivered: lent ones back to their holder, the others
        to another member, or held."""
        others = []
        for delivery in reversed(deliveries):  # each back first in line: the last first
            holder = delivery.group.holder  # type: ignore[union-attr]  # shared: it has a group
            if holder is None or not holder.returned(delivery):
                others.append(delivery)
        for delivery in reversed(others):
            group: SharedGroup = delivery.group  # type: ignore[assignment]  # shared: it has one
            member = group.pick()
            if member is not None:  # nobody to acknowledge or slow down: results unused
                member.session.deliver(member_copy(delivery.message, group, member))
            elif group.holder is not None:
                group.holder.hold(delivery.message)

    def online(self, session: Session) -> None:
        """A member's client is back: the groups it belongs to drain."""
        for state in session.subscriptions.values():
            if state.topic_filter.startswith(SHARE_PREFIX):
                name, topic_filter = parse_shared(state.topic_filter)
                holder = self.find(session.tenant, name, topic_filter)  # type: ignore[arg-type]  # shared: it has a name
                if holder is not None:
                    holder.drain()

    def _new(self, member: Session, topic_filter: str, name: str) -> Holder:
        session = Session(member.tenant, holder_id(name, topic_filter), max_queued=ALWAYS)
        session.tenant_id = member.tenant_id
        return self._keep(session, topic_filter, name)

    def _keep(self, session: Session, topic_filter: str, name: str) -> Holder:
        router = self.router.for_tenant(session.tenant)
        group = router.hold(topic_filter, name, None)
        session.expiry_interval = DEFAULTS["group_retention"]
        session.on_drop = self.dropped
        holder = Holder(session.tenant, group, session, self)
        router.hold(topic_filter, name, holder)  # (the route says so, where no member is here)
        if self.storage is not None:
            self.storage.attach(session)
        self.holders.setdefault(session.tenant, {})[(topic_filter, name)] = holder
        return holder

    def restored(
        self, session: Session, topic_filter: str, name: str, expires_at: datetime | None
    ) -> Holder:
        """A stored group back after a restart, with its queue (`session`'s)."""
        holder = self.find(session.tenant, name, topic_filter)
        if holder is not None:  # a member restored before it made one: this one has the rows
            self._end(holder, delete=False)
        holder = self._keep(session, topic_filter, name)
        holder.bytes = sum(len(d.message.payload) for d in session.queue)
        if not holder.group.members:
            remaining: float = DEFAULTS["group_retention"]
            if expires_at is not None:
                remaining = (expires_at - datetime.now(UTC)).total_seconds()
            holder.expire_in(remaining)
        return holder

    def saved(self, holder: Holder) -> None:
        if self.storage is not None and holder.session.persist is not None:
            self.storage.group_saved(holder)

    # -- its end --------------------------------------------------------------------------

    def expired(self, holder: Holder) -> None:
        holder.expiry = None
        if (
            not holder.group.members
            and self.find(holder.tenant, holder.name, holder.topic_filter) is holder
        ):
            self._end(holder, delete=True)

    def delete(self, tenant: str, name: str, topic_filter: str) -> bool:
        """The tenant deleted the group: what it held goes; members still subscribed go on in
        a group that starts empty."""
        holder = self.find(tenant, name, topic_filter)
        if holder is None:
            return False
        self._end(holder, delete=True)
        members = holder.group.members
        if members:  # still subscribed: it goes on, empty
            self.joined(members[0].session, topic_filter, name)
        return True

    def _end(self, holder: Holder, *, delete: bool) -> None:
        holder.clear()
        held = self.holders.get(holder.tenant, {})
        if held.get((holder.topic_filter, holder.name)) is holder:
            del held[(holder.topic_filter, holder.name)]
            if not held:
                self.holders.pop(holder.tenant, None)
        if holder.group.holder is holder:
            self.router.for_tenant(holder.tenant).unhold(holder.topic_filter, holder.name)
        if delete and self.storage is not None and holder.session.persist is not None:
            self.storage.group_deleted(holder)

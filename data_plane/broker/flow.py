"""The read gate: every reason a connection stops reading its client, in one place (uvicorn's
`FlowControl`).

Three reasons, each with its own way out:

- `burst`: one read brought many packets (while the tenants' shares apply, a read is decoded and
  handled up to the tenant's room in this loop turn, `read_slice`, the rest of it waiting in the
  connection's reader: `reader.more`), or the tenant has had its share of this loop turn
  (`turns.TenantTurns`, looked at every `SHARE_CHECK` packets);
  yield a loop turn so the deliveries they produced are written before more is read, and other
  tenants go first (fairness, bounded batches). Ends on the next turn, or on a later one when
  the tenant's share is had (`TenantTurns.wait_turn`).
- `rate`: a client over a publish rate (its tenant's or its device's): the packet is held and
  retried when the tenant's share (`fair_share.PublishShare`) says its turn has come (`wake`).
- `throttled_by`: subscribers whose queues backed up with what this client published (the
  `slow_down` of `Broker.publish`'s result); each releases it when drained, and all of them at
  once after `THROTTLE_LIMIT` seconds (a dead subscriber cannot hold a publisher for long).

While reading is paused by `rate` or `throttled_by` (`holds`), packets already read wait in
`held`, in order, and go first when the gate reopens.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from common.mqtt.packets import Packet, Publish
from data_plane.broker.accounting import Accounts
from data_plane.broker.ports import Recipient
from data_plane.broker.session import Session
from data_plane.broker.turns import TenantTurns


class Reading(Protocol):
    """The connection's transport, as the gate sees it."""

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...


class FlowBroker(Protocol):
    """What the gate and the pacer ask of the broker (`broker.Broker`)."""

    @property
    def accounts(self) -> Accounts: ...

    def quota_exceeded(self, tenant: str, key: str, *, throttled: bool = False) -> None: ...


# While the tenants' shares apply, a read is decoded up to the tenant's room in the loop turn, and
# at least this many packets at a time: a 256 KiB read of small publishes is hundreds of packets,
# milliseconds of work in one callback that another tenant's packet would wait behind. Tenants
# busy alike (each with room) and a tenant alone read whole: slicing every read at 64 cost ~5 %
# more CPU per QoS 0 message with ten tenants busy alike (bench.limiter, bench/RESULTS.md).
READ_SLICE = 64
SHARE_CHECK = 16  # packets handled between two looks at the tenant's share of the loop turn


class FlowOwner(Protocol):
    """The connection, as its gate and pacer see it."""

    @property
    def transport(self) -> Reading: ...
    @property
    def closing(self) -> bool: ...
    @property
    def tenant(self) -> str: ...
    @property
    def broker(self) -> FlowBroker: ...
    @property
    def session(self) -> Session | None: ...
    @property
    def reader(self) -> Unread: ...

    def data_received(self, data: bytes) -> None: ...  # b"": the next slice of the last read


class Unread(Protocol):
    """The connection's reader (`codec.Reader`), as the gate sees it."""

    @property
    def more(self) -> bool: ...  # packets of the last read not decoded yet


class ReadGate:
    BURST = READ_SLICE  # packets from one read after which the connection yields a loop turn
    THROTTLE_LIMIT = 2.0  # seconds a backed-up subscriber may hold a publisher

    __slots__ = (
        "owner", "loop", "process", "turns", "held", "burst", "rate", "throttled_by", "_timer",
    )  # fmt: skip

    def __init__(
        self,
        owner: FlowOwner,
        loop: asyncio.AbstractEventLoop,
        process: Callable[[list[Packet]], int],
        turns: TenantTurns,
    ) -> None:
        self.owner = owner  # the connection: its transport, `closing`, its tenant
        self.loop = loop
        self.turns = turns  # the tenants' shares of a loop turn
        self.process = process  # handles packets (and may close the gate again): how many
        self.held: list[Packet] = []  # packets read but not handled while the gate holds
        self.burst = False
        self.rate = False
        self.throttled_by: set[Recipient] = set()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def holds(self) -> bool:
        """Paused by a quota or a backed-up subscriber: the rest of a read waits too."""
        return self.rate or bool(self.throttled_by)

    def after_read(self, count: int, unread: bool = False) -> None:
        """`count` packets of a read were handled; `unread`: more of it waits in the reader."""
        self.turns.spend(self.owner.tenant, count)
        # libuv reads a busy socket many times per loop turn: yield after a burst.
        if (count >= self.BURST or unread) and not self.burst:
            self._yield_turn()

    def read_slice(self) -> int:
        """Packets to decode from a read now (0: all): the tenant's room in this loop turn, at
        least `READ_SLICE`, while the shares apply."""
        turns = self.turns
        if not turns.limiting:
            return 0
        room = turns.room(self.owner.tenant)  # (finite while the shares apply)
        return int(room) if room > READ_SLICE else READ_SLICE  # (an int: compared per packet)

    def share_had(self, handling: int) -> bool:
        """The tenant had its share of this loop turn, with `handling` packets of a read not
        counted yet (`SHARE_CHECK`)."""
        turns = self.turns
        return turns.limiting and turns.over(self.owner.tenant, handling)

    def next_turn(self, packets: list[Packet]) -> None:
        """These wait for a later turn (the tenant had its share of this one, or packets read
        earlier wait: they go first)."""
        self.held.extend(packets)
        if not self.burst:
            self._yield_turn()

    def _yield_turn(self) -> None:
        self.burst = True
        self.owner.transport.pause_reading()
        self.loop.call_soon(self._end_burst)

    def hold_for_rate(self, packet: Publish) -> None:
        """Over a publish rate: stop reading; `packet` goes first when the tenant's share
        wakes us (`wake`)."""
        if not self.rate:
            self.owner.transport.pause_reading()
            self.rate = True
        self.held.insert(0, packet)

    @property
    def closing(self) -> bool:  # fair_share.Waiter: a closed connection's turn is skipped
        return self.owner.closing

    def wake(self) -> None:
        """fair_share.Waiter: our held publish may go now."""
        self._end_rate()

    def slow_down(self, sessions: tuple[Recipient, ...]) -> None:
        """Stop reading for these subscribers (never for the client's own session); each
        releases the connection (`unthrottle_by`) once its queue has drained."""
        owner = self.owner
        for session in sessions:
            if session is not owner.session:
                self.throttle_by(session)
                session.hold(owner)

    def throttle_by(self, session: Recipient) -> None:
        if self.owner.closing:
            return
        if not self.throttled_by:
            owner = self.owner
            owner.transport.pause_reading()
            owner.broker.accounts.publisher_held(owner.tenant)
            self._timer = self.loop.call_later(self.THROTTLE_LIMIT, self._throttle_expired)
        self.throttled_by.add(session)

    def unthrottle_by(self, session: Recipient) -> None:
        self.throttled_by.discard(session)
        if not self.throttled_by:
            self._unthrottle_all()

    def resume(self) -> None:
        """Resume reading once nothing pauses it, handling held packets first."""
        if self.owner.closing or self.throttled_by or self.rate or self.burst:
            return
        owner = self.owner
        if self.held:
            held, self.held = self.held, []
            self.turns.spend(owner.tenant, self.process(held))
            if self.held or self.throttled_by or self.rate or self.burst:
                return
        if owner.reader.more:  # the rest of the last read, a slice at a time
            owner.data_received(b"")
            if owner.closing or self.held or self.holds or self.burst:
                return
        owner.transport.resume_reading()

    def _end_burst(self) -> None:
        if self.owner.closing:  # what it held is not handled: no more turns to wait for
            return
        if (self.held or self.owner.reader.more) and self.share_had(0):  # others first
            self.turns.wait_turn(self.owner.tenant, self._end_burst)
            return
        self.burst = False
        self.resume()

    def _end_rate(self) -> None:
        self.rate = False
        self.resume()

    def _throttle_expired(self) -> None:
        """The subscribers that held us for the whole allowance are not draining: they stop
        holding publishers (their queues fill to their limit and drop) until they drain."""
        self._timer = None
        accounts = self.owner.broker.accounts
        for session in self.throttled_by:
            if not session.stalled and session.tenant is not None:  # (None: the cluster's bus)
                accounts.subscriber_stalled(session.tenant)
            session.stalled = True
            session.blocked_publishers.pop(self.owner, None)
        self._unthrottle_all()

    def _unthrottle_all(self) -> None:
        self.throttled_by.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.resume()


class OutboundPacer:
    """The tenant's outbound bytes/s quota, spent: the session waits, and is pumped again when
    the bucket has refilled (one timer per pause, not one per delivery held back)."""

    __slots__ = ("owner", "loop", "_timer")

    def __init__(self, owner: FlowOwner, loop: asyncio.AbstractEventLoop) -> None:
        self.owner = owner  # the connection: its tenant, broker and session
        self.loop = loop
        self._timer: asyncio.TimerHandle | None = None

    def pace(self, wait: float) -> None:
        if self._timer is None:  # slowed, nothing refused: counted as throttling
            self.owner.broker.quota_exceeded(self.owner.tenant, "outbound_rate", throttled=True)
            self._timer = self.loop.call_later(wait, self._end)

    def cancel(self) -> None:
        if self._timer:
            self._timer.cancel()

    def _end(self) -> None:
        self._timer = None
        owner: object = self.owner  # the connection, which is its session's Outlet too
        session = self.owner.session
        if session is not None and session.connection is owner:
            session.pump()

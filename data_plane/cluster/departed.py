"""Sessions that moved away from this node, kept for what other nodes sent here before they knew.

A relay (data_plane.cluster.relay) stands in this node's router until the new node's routes are
in this node's table, then leaves. But a message another node routed here under its old table
may still be on its way at that moment: written to this node's stream before its sender learned
the new route (its forwarder batches, its route channel lags behind ours), or written in time
and read late (this node's reader held by back-pressure, or starved of CPU). Routed after the
relay left, it matched nobody here and was lost, though its publisher had its PUBACK: a reader
50 ms behind lost acknowledged messages at every move.

So a relay that leaves the router is kept here, departed, with a cutoff: the bus's clock (Redis
TIME, the clock that stamps stream entry ids) when it left, plus `MARGIN` for the senders still
catching up. A message read from this node's stream from an entry written before the cutoff
that matches a departed relay's filters goes to the session's new node as the relay would have
sent it (`route`); one that went there directly as well is delivered once (the new node's
window, data_plane.cluster.exactly). A relayed message for a session that has moved on again
goes on the same way (`pass_on`): relays chain along the moves instead of dropping it. A copy
of a message the session already got here (its window here saw the origin) does not follow it:
`second_copy`, data_plane.cluster.exactly.

A record goes when the session comes back here (`forget`), when this node's stream is read past
its cutoff (entry ids only grow), or `KEEP` seconds after it left, whichever is first. The
filters are matched in a router of their own, consulted only while there are records: nothing
is added to the path of a node whose sessions stay put.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from redis.exceptions import RedisError

from data_plane.broker.message import Message
from data_plane.broker.ports import Commit
from data_plane.broker.router import Router, Subscriber
from data_plane.broker.session import Delivery

log = logging.getLogger("data_plane.cluster")

MARGIN = 2.0  # seconds after a relay left during which senders may still use the old route
KEEP = 30.0  # seconds a departed relay is kept at most


class Departing(Protocol):
    """What a departed relay is here (data_plane.cluster.relay.Relay)."""

    tenant: str
    target: tuple[str, str]  # the session's key (tenant, client id)
    filters: list[tuple[str, Subscriber]]  # (topic filter, its router entry)

    def deliver(self, delivery: Delivery) -> Commit | None: ...


@dataclass
class _Record:
    relay: Departing  # out of the node's router
    left: float = field(default_factory=time.monotonic)
    # The bus's time (ms) of the last entry it applies to; None: not known yet (every entry).
    cutoff_ms: int | None = None


def entry_ms(entry_id: bytes) -> int:
    """The bus's time (ms) a stream entry was written at: its id is `<ms>-<seq>`."""
    return int(entry_id.split(b"-", 1)[0])


# (session key, the message's origin) -> whether the session got that message here already
SecondCopy = Callable[[tuple[str, str], tuple[str, int] | None], bool]


class Departed:
    """This node's departed relays (see the module's docstring)."""

    def __init__(self, redis: Any, second_copy: SecondCopy) -> None:
        self.redis = redis  # the bus: its clock (TIME) gives each record's cutoff
        self.second_copy = second_copy  # (data_plane.cluster.exactly.Origins)
        self.relayed = 0  # messages sent on to the node a session moved to
        self.records: dict[tuple[str, str], _Record] = {}  # by session key
        # The same, oldest first, for purging from the front: a mass move (a node's clients all
        # reconnecting elsewhere) leaves thousands, and a message must not walk them all.
        self._order: deque[tuple[tuple[str, str], _Record]] = deque()
        self.router = Router()
        self._tasks: set[asyncio.Task[None]] = set()

    def add(self, relay: Departing) -> None:
        """`relay` left the router (the new node's routes are announced): keep it departed,
        applying to every entry until the bus's clock gives its cutoff."""
        self.forget(relay.target)
        record = self.records[relay.target] = _Record(relay)
        self._order.append((relay.target, record))
        router = self.router.for_tenant(relay.tenant)
        for topic_filter, sub in relay.filters:
            router.subscribe(topic_filter, sub, None)
        task = asyncio.get_running_loop().create_task(self._cut(record))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def forget(self, key: tuple[str, str]) -> None:
        """The session `key` is (coming) back here: what reaches it is routed to it."""
        record = self.records.pop(key, None)
        if record is not None:
            router = self.router.for_tenant(record.relay.tenant)
            for topic_filter, _sub in record.relay.filters:
                router.unsubscribe(topic_filter, record.relay, None)

    def route(self, message: Message, written_ms: int, commits: list[Commit]) -> None:
        """A message read from this node's stream, from an entry written at `written_ms`:
        on to the new node of every departed session it was (maybe) meant for."""
        self._purge(written_ms)
        subscribers, _groups = self.router.match(message.tenant, message.topic)
        relays = {id(sub.session): sub.session for sub in subscribers}
        for relay in relays.values():
            cutoff = self.records[relay.target].cutoff_ms
            if cutoff is None or written_ms <= cutoff:  # (sent before every node knew)
                self._send(relay, message, commits)

    def pass_on(self, message: Message, client_id: str, commits: list[Commit]) -> bool:
        """A message relayed here for one session that is no longer here: on to where it went,
        if it left from here lately."""
        self._purge(None)
        record = self.records.get((message.tenant, client_id))
        if record is None:
            return False
        self._send(record.relay, message, commits)
        return True

    def _send(self, relay: Departing, message: Message, commits: list[Commit]) -> None:
        if self.second_copy(relay.target, message.cluster_origin):
            return  # delivered here before the session left: it has it
        self.relayed += 1
        commit = relay.deliver(Delivery(message, message.qos, message.retain))
        if commit is not None:
            commits.append(commit)

    def _purge(self, written_ms: int | None) -> None:
        """The oldest records, while past their cutoff (this stream is read past it) or older
        than KEEP. Memory only: `route` checks each record's own cutoff, so a record whose
        cutoff is not known yet, holding up the ones behind it, costs no extra copies."""
        order, oldest = self._order, time.monotonic() - KEEP
        while order:
            key, record = order[0]
            if self.records.get(key) is record:
                cutoff = record.cutoff_ms
                past = written_ms is not None and cutoff is not None and written_ms > cutoff
                if not past and record.left >= oldest:
                    return
                self.forget(key)
            order.popleft()

    async def _cut(self, record: _Record) -> None:
        try:
            seconds, micros = await self.redis.time()
        except (RedisError, OSError) as exc:  # kept until KEEP: more copies, none lost
            log.debug("bus time for a departed relay not read (%s)", exc)
            return
        record.cutoff_ms = seconds * 1000 + micros // 1000 + int(MARGIN * 1000)

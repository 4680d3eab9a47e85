"""Exactly once (QoS 2) while a session moves between nodes: a message reaches it once.

When a persistent session moves from node A to node B (data_plane.cluster.relay), a publisher's
node that already knows B's route but not yet that A's is gone sends a message to both: B gets
it directly, and again from A's relay. Likewise a message published at B itself reaches the
session at B and, through B's stale route to A, A's relay. So every message carries its origin:
the node it was published at and that node's running count of publishes (`Origins.local`). A
direct copy's origin node is the writer of its stream entry (`w`), a relayed copy names it
(`codec.TARGET`'s pair), both carry the count (`codec.encode(seq=...)`).

B watches the moved session for `WINDOW` seconds from the moment it is restored there (the
relay stands at most `RELAY_MAX`, then passes on for `departed.MARGIN` what other nodes sent A
before they knew, and both copies of one message are on the bus within milliseconds of each
other): its `Window` records the origin of every delivery and drops a second one with the same
origin (whichever came first: direct, relayed, or published at B).
The state is one set per moved session, bounded (`WINDOW_MAX` origins: beyond it the window
closes early, at least once again, and says so in the log) and gone when the window ends.

How a delivery's origin is known: it travels on the message (`Message.cluster_origin`), set by
the cluster as it routes the message here (`mark`: at the publish, `local`; from the stream, the
entry's writer and count; from a relay, the pair it names) and cleared once it is routed
(`routed`: a retained copy that reaches a new subscription later is not a second copy of this
delivery). Deliveries the cluster did not mark (wills, delayed messages, retained copies on
subscribe) pass unchecked.

The same holds for a survivor taking a dead node's place (data_plane.cluster.inherit): from the
moment it adopts the dead node's persistent sessions they are in its router, so a message
published at the survivor reaches them at once and, until every node has switched from the
dead node to the survivor, also lands in the dead node's stream, which the survivor drains into
them. The adopted sessions are watched the same way until the inheritance is over.

The window is the session's `screen` (asked first of every delivery), set as the session is
created at B (the broker's `session.adopted` hook, which every opened or restored session
passes through), before its subscriptions enter the router: no direct copy reaches it
unrecorded.

A window outlives the session's stay when the session moves on within it (B → C): a copy that
follows the session from here (a relayed one passed on, or a direct one read late from this
node's stream: data_plane.cluster.departed) is dropped here when the window saw its origin —
the session got that message here, and C's window never saw it. A session that comes back while
its window here is still open continues it (`seen` carried over). A node stalled for a moment
(its routes still standing at the publishers, its stream read late) sends such copies along
the chain of moves after the session has left the node that delivered the message.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

from data_plane.broker.message import Message
from data_plane.broker.session import Delivery, Session
from data_plane.cluster.departed import MARGIN
from data_plane.cluster.relay import RELAY_MAX

if TYPE_CHECKING:
    from data_plane.broker.broker import Broker

log = logging.getLogger("data_plane.cluster")

# Seconds a moved session's deliveries are checked for duplicates: the relay's life, then its
# cutoff as a departed relay (departed.py), and a moment for the old node's reader to get there.
WINDOW = RELAY_MAX + MARGIN + 3.0
WINDOW_MAX = 50_000  # origins one window keeps at most

Origin = tuple[str, int]  # (node the message was published at, its count of publishes there)


def mark(message: Message, node: str, seq: int) -> None:
    """`message` is about to be routed here; it was published at `node` as `seq` (0: not
    known: unchecked)."""
    message.cluster_origin = (node, seq) if node and seq else None


def routed(message: Message) -> None:
    """`message` was routed: its origin no longer applies (see the module's docstring)."""
    message.cluster_origin = None


class Origins:
    """This node's side of exactly once across a move (see the module's docstring)."""

    def __init__(self, node_id: str) -> None:
        self.node_id = node_id
        self.count = 0  # publishes at this node (the `seq` of their origin)
        self.expected: set[tuple[str, str]] = set()  # sessions moving here, not created yet
        self.open: dict[tuple[str, str], Window] = {}  # by session key
        self.opened = 0  # windows opened here
        self.duplicates = 0  # deliveries dropped as duplicates

    def attach(self, broker: Broker) -> None:
        """Open a window on a moving session as soon as the broker wires it (its
        `session.adopted` hook runs for every session, opened or restored, before it is routed
        to)."""
        broker.hooks.add("session.adopted", self._adopted)
        broker.metric_sources.append(self.metrics)

    def _adopted(self, session: Session) -> None:
        if session.key in self.expected:
            self.expected.discard(session.key)
            Window(self, session)

    def second_copy(self, key: tuple[str, str], origin: Origin | None) -> bool:
        """A copy of a message about to follow the session `key` away from here: True (and
        counted as dropped) when the session's window here saw its origin (see the module's
        docstring)."""
        window = self.open.get(key)
        if origin is None or window is None or origin not in window.seen:
            return False
        self.duplicates += 1
        return True

    def local(self, message: Message) -> int:
        """A message published at this node: its origin count (0 is "unknown")."""
        self.count += 1
        message.cluster_origin = (self.node_id, self.count)
        return self.count

    def expect(self, key: tuple[str, str]) -> None:
        """The session `key` (tenant, client id) is moving here from a live node's relay."""
        self.expected.add(key)

    def settled(self, key: tuple[str, str]) -> None:
        """Its CONNECT is done (the window opened, or the session never came)."""
        self.expected.discard(key)

    def close(self, keys: Iterable[tuple[str, str]]) -> None:
        """The sessions `keys` need no more watching (an inheritance is over)."""
        for key in keys:
            self.expected.discard(key)
            window = self.open.get(key)
            if window is not None:
                window.close()

    def metrics(self) -> Iterator[Metric]:
        duplicates = CounterMetricFamily(
            "mqtt_cluster_duplicates_dropped",
            "Second copies of a message dropped while a session moved here (cluster/exactly.py)",
        )
        duplicates.add_metric([], self.duplicates)
        windows = CounterMetricFamily(
            "mqtt_cluster_move_windows", "Sessions moved here watched for duplicate copies"
        )
        windows.add_metric([], self.opened)
        yield from (duplicates, windows)


class Window:
    """One moved session's check for duplicates: its `screen` for `WINDOW` seconds."""

    def __init__(self, origins: Origins, session: Session) -> None:
        self.origins = origins
        self.session = session
        self.seen: set[Origin] = set()
        earlier = origins.open.get(session.key)
        if earlier is not None:  # back here within its window: what it got here still counts
            self.seen = earlier.seen
            earlier.close()
        session.screen = self.first_copy
        origins.opened += 1
        origins.open[session.key] = self
        self.handle = asyncio.get_running_loop().call_later(WINDOW, self.close)

    def first_copy(self, delivery: Delivery) -> bool:
        """The session has not had this message here yet (the second copy is dropped)."""
        origin = delivery.message.cluster_origin
        if origin is not None:
            if origin in self.seen:
                self.origins.duplicates += 1
                return False
            self.seen.add(origin)
            if len(self.seen) > WINDOW_MAX:
                log.warning("move window of %s/%s full: closed early", *self.session.key)
                self.close()
        return True

    def close(self) -> None:
        self.handle.cancel()
        if self.session.screen == self.first_copy:
            self.session.screen = None
        if self.origins.open.get(self.session.key) is self:
            del self.origins.open[self.session.key]
        self.seen = set()

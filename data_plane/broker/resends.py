"""Knowing a resend: a QoS 1 PUBLISH sent again (DUP) after its PUBACK was lost is acknowledged
again, not delivered twice.

A client resends its unacknowledged QoS 1 publishes with DUP set when it reconnects (paho does so
whether or not the session was resumed). When the connection broke after our PUBACK left but
before the client read it, that resend is a message we already delivered. QoS 2 has packet-id
state for this; QoS 1 has none, and a client may reuse a packet id as soon as it has the PUBACK,
so the id alone proves nothing: a resend is a DUP publish with the packet id, topic *and*
payload of one we took.

- While connected, a connection remembers its last `SLOTS` QoS 1 publishes by packet id, as
  (packet id, topic, payload) (`RecentPublishes`; a slot per id modulo `SLOTS`, so one list
  store per publish). Not the packets themselves: those are objects the garbage collector
  tracks, and thousands of them kept alive a little longer were promoted to its oldest
  generation and made its full collections run often (QoS 1 at 1.49x the CPU per message, in
  `bench.limiter`); a tuple of a number and two strings is untracked at its first collection.
- When it closes, what it remembers is kept for `KEEP` seconds under (tenant, client id), as
  digests (`Digests`: no payload held), for the client's next connection on this broker.

A DUP is rare, so only a DUP pays for the comparison (and, against digests, a hash). This
covers the in-flight window of common clients (paho: 20) when their ids run in sequence; a
resend we do not recognise is delivered again, as before: never dropped on a guess.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

SLOTS = 32  # QoS 1 publishes a connection remembers (the in-flight window of common clients)
KEEP = 60.0  # seconds a closed connection's publishes are remembered for its client id
MAX_CLIENTS = 100_000  # client ids remembered at once; the oldest go first


class Digests:
    """A closed connection's last QoS 1 publishes: packet id -> (topic, size, payload hash)."""

    __slots__ = ("entries", "until")

    def __init__(self, entries: dict[int, tuple[str, int, int]], until: float) -> None:
        self.entries = entries
        self.until = until

    def has(self, packet_id: int, topic: str, payload: bytes) -> bool:
        entry = self.entries.get(packet_id)
        return entry is not None and entry == (topic, len(payload), hash(bytes(payload)))


class RecentPublishes:
    """A connection's last QoS 1 publishes, and what its client id's previous connection on this
    broker took (`earlier`)."""

    __slots__ = ("slots", "earlier", "kept", "closed")

    def __init__(self, earlier: Digests | None = None) -> None:
        # slot packet_id % SLOTS -> (packet id, topic, payload); the admission writes it inline
        self.slots: list[tuple[int, str, bytes] | None] = [None] * SLOTS
        self.earlier = earlier
        self.kept: Digests | None = None  # what the broker keeps of us once closed
        self.closed = False

    def is_resend(self, packet_id: int, topic: str, payload: bytes) -> bool:
        slot = self.slots[packet_id % SLOTS]
        if slot is not None and slot[0] == packet_id:
            return slot[1] == topic and slot[2] == payload
        earlier = self.earlier
        return earlier is not None and earlier.has(packet_id, topic, payload)

    def forget(self, packet_id: int) -> None:
        """A publish we did not keep after all (its commit failed): its resend is delivered."""
        slot = self.slots[packet_id % SLOTS]
        if slot is not None and slot[0] == packet_id:
            self.slots[packet_id % SLOTS] = None
        for digests in (self.earlier, self.kept):
            if digests is not None:
                digests.entries.pop(packet_id, None)

    def digests(self, until: float) -> Digests | None:
        """What to keep once the connection is gone (None: nothing was published)."""
        entries = dict(self.earlier.entries) if self.earlier is not None else {}
        for slot in self.slots:
            if slot is not None:
                packet_id, topic, payload = slot
                entries[packet_id] = (topic, len(payload), hash(bytes(payload)))
        return Digests(entries, until) if entries else None


class ResendMemory:
    """The broker's memory of closed connections' last publishes, by (tenant, client id)."""

    def __init__(self, keep: float = KEEP, clock: Callable[[], float] = time.monotonic) -> None:
        self.keep, self._clock = keep, clock
        self._by_client: OrderedDict[tuple[str, str], Digests] = OrderedDict()

    def closed(self, tenant: str, client_id: str, recent: RecentPublishes) -> None:
        """The connection is over (said once, whichever way it ended, however often told)."""
        if recent.closed:
            return
        recent.closed = True
        digests = recent.kept = recent.digests(self._clock() + self.keep)
        if digests is None:
            return
        key = (tenant, client_id)
        self._by_client[key] = digests
        self._by_client.move_to_end(key)
        while len(self._by_client) > MAX_CLIENTS:
            self._by_client.popitem(last=False)

    def opened(self, tenant: str, client_id: str) -> RecentPublishes:
        """A new connection's memory, with its client id's previous one if still fresh."""
        digests = self._by_client.pop((tenant, client_id), None)
        if digests is not None and digests.until < self._clock():
            digests = None
        return RecentPublishes(digests)

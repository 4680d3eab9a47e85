"""Where a plain TCP client lands, until its CONNECT says whose it is (tenant-affine workers).

With several workers on one port (SO_REUSEPORT) the kernel puts each connection on any of
them. `Landing` is the listener's protocol while nothing but the CONNECT is known: it keeps the
bytes it reads, reads the CONNECT's username (`tenant/device`) and asks `home(tenant,
client_id)` (`data_plane.cluster.affinity`) which worker serves the tenant:

- this one (or nobody can say: one worker, no username, not a CONNECT, bytes the codec
  refuses): the socket becomes an ordinary `MQTTConnection` (`transport.set_protocol`), fed
  the same bytes, so it answers exactly as it always did; from then on the transport talks to
  the connection directly, with nothing in between on the message path;
- another one: reading stops, the socket and the bytes go to that worker
  (`handover.hand_over`), and this worker forgets it; the home serves it with
  `Handed`, which is the same `MQTTConnection` fed the same bytes. If the hand-over fails
  (the home died, or is not listening yet) this worker serves the client itself: a client is
  never refused for it.

The doorway counts the socket from the accept (per source, descriptors) and the CONNECT
deadline runs from the accept, on the landing worker and then on the home (the hand-over
carries the moment of the accept). A WebSocket is handed over the same way once its first
frames hold the CONNECT (`data_plane.broker.websocket`); TLS listeners do not hand over: a
client stays on the worker the kernel chose.
"""

from __future__ import annotations

import asyncio

from common.mqtt.codec import Reader
from common.mqtt.errors import MQTTError
from data_plane.broker.broker import Broker
from data_plane.broker.connection import MQTTConnection
from data_plane.broker.handover import TCP, Handover, hand_over, now


class Landing(asyncio.Protocol):
    """A plain TCP socket before its CONNECT was read; see the module's docstring."""

    def __init__(self, broker: Broker, handover: Handover) -> None:
        self.broker, self.handover = broker, handover
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.peek = Reader(server_side=True, max_packet_size=broker.config.max_packet_size)
        self.accepted_at = now()
        self.door = None
        self.deadline: asyncio.TimerHandle | None = None
        self.settled = False  # served here or handed over: nothing more for this protocol
        self.lost = False

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.door = self.broker.doorway.enter(peer[0] if isinstance(peer, tuple) else "")
        if self.door is None:  # too many strangers: refused before reading a byte
            self.settled = True
            transport.abort()
            return
        timeout = self.broker.config.connect_timeout
        self.deadline = asyncio.get_running_loop().call_later(timeout, self._too_slow)

    def _too_slow(self) -> None:
        if not self.settled and self.transport is not None:
            self.settled = True
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.settled:
            return
        self.buffer += data
        try:
            packets = self.peek.feed(data)
        except MQTTError:  # the connection refuses it as it always has
            self._serve_here()
            return
        if not packets:
            return
        home = self.handover.home_of(packets[0], len(self.buffer))
        if home is None:
            self._serve_here()
            return
        self.settled = True
        data = bytes(self.buffer)
        hand_over(self.handover, self.transport, home, data, self.accepted_at, TCP, self._handed)

    def _handed(self, handed: bool) -> None:
        if self.lost:  # the client went meanwhile: whoever has the socket sees it closed
            return
        if handed:
            self._forget()
            return
        self.handover.counts.failed += 1
        self.settled = False
        self._serve_here()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def _forget(self) -> None:
        """The home has the socket: this worker's descriptor goes, the connection does not
        (the home's descriptor keeps it open; nothing is shut down or reset)."""
        if self.deadline is not None:
            self.deadline.cancel()
        if self.door is not None:
            self.door.left()
            self.door = None
        self.transport.abort()

    def _serve_here(self) -> None:
        self.settled = True
        if self.deadline is not None:
            self.deadline.cancel()
        conn = MQTTConnection(self.broker)
        conn.door = self.door  # counted from the accept, here
        self.door = None
        become(self.transport, conn, bytes(self.buffer), self.accepted_at)

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self.deadline is not None:
            self.deadline.cancel()
        if self.door is not None:
            self.door.left()
            self.door = None


def become(transport: asyncio.Transport, conn: MQTTConnection, data: bytes, since: float) -> None:
    """`conn` takes the transport over as if it had accepted it, with the bytes read so far and
    what is left of its CONNECT deadline."""
    transport.set_protocol(conn)
    conn.connection_made(transport)
    if conn.closing:  # refused at the doorway
        return
    conn.timer.cancel()
    conn.timer.deadline(max(0.0, since + conn.config.connect_timeout - now()))
    if data:
        conn.data_received(data)


class Handed(asyncio.Protocol):
    """A plain TCP socket another worker handed over: served here from its first moment (a
    WebSocket's is `WebSocketProtocol(replay=…)`; `data_plane.server` picks by its kind)."""

    def __init__(self, broker: Broker, data: bytes, accepted_at: float) -> None:
        self.broker, self.data, self.accepted_at = broker, data, accepted_at

    def connection_made(self, transport: asyncio.Transport) -> None:
        # Before the transport's first read: the handed bytes come first.
        become(transport, MQTTConnection(self.broker), self.data, self.accepted_at)

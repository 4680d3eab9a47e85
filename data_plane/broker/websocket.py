"""MQTT over WebSocket (path `/mqtt`, subprotocol `mqtt`): wsproto does the HTTP upgrade and
framing; the MQTT bytes go to an ordinary `MQTTConnection` through a transport adapter.

With tenant-affine workers (`data_plane.broker.landing`) a WebSocket is handed over too: until
its first MQTT packet (the CONNECT) is read, the protocol keeps every byte the client sent, the
upgrade request included, and holds the MQTT bytes back from the connection. If the tenant's
home is another worker, the socket and those bytes go there (`handover.hand_over`, kind
`WS`), and the home replays them through a fresh protocol (`replay=`): wsproto reaches the same
state (the server's side of the upgrade is deterministic: no extension is ever accepted), only
the upgrade's answer is not sent again, and the CONNECT reaches the home's connection as if it
had been read there. Otherwise (one worker, home here, not a CONNECT, bytes the codec refuses)
the connection gets the held bytes and answers exactly as it always did.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)

from common.mqtt.codec import Reader
from common.mqtt.errors import MQTTError
from common.mqtt.reason_codes import ReasonCode
from data_plane.broker import refused
from data_plane.broker.broker import Broker
from data_plane.broker.connection import MQTTConnection
from data_plane.broker.handover import WS, Handover, hand_over, now

WS_PATH = "/mqtt"
# The close codes wsproto answers a frame it cannot parse with (1002 protocol error: unmasked
# client frame, reserved bits, bad opcode, fragmented control frame…; 1007 invalid UTF-8; 1009
# too big): a framing error, a refusal operators see. A client's own close is not one.
FRAMING_ERRORS = frozenset({1002, 1007, 1009})
END_OF_REQUEST = re.compile(rb"\r?\n\r?\n")  # an upgrade request is a GET: no body


class _WebSocketTransport(asyncio.Transport):
    """What the MQTT connection writes to: each write becomes one binary frame."""

    def __init__(self, outer: WebSocketProtocol) -> None:
        super().__init__()
        self.outer = outer

    def write(self, data: bytes) -> None:
        self.outer.send_bytes(data)

    def close(self) -> None:
        self.outer.close()

    def abort(self) -> None:
        if self.outer.transport is not None:
            self.outer.transport.abort()

    def is_closing(self) -> bool:
        return self.outer.transport is None or self.outer.transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.outer.transport.get_extra_info(name, default)

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self.outer.transport.set_write_buffer_limits(high=high, low=low)

    def get_write_buffer_size(self) -> int:
        return self.outer.transport.get_write_buffer_size() if self.outer.transport else 0

    def pause_reading(self) -> None:
        self.outer.transport.pause_reading()

    def resume_reading(self) -> None:
        self.outer.transport.resume_reading()


class WebSocketProtocol(asyncio.Protocol):
    """One WebSocket client; see the module's docstring for the hand-over."""

    def __init__(
        self,
        broker: Broker,
        transport_name: str = "ws",
        *,
        handover: Handover | None = None,
        replay: bytes = b"",
        accepted_at: float | None = None,
    ) -> None:
        self.broker = broker
        self.ws = WSConnection(ConnectionType.SERVER)
        self.transport: asyncio.Transport | None = None
        self.mqtt = MQTTConnection(broker, transport_name=transport_name)
        self.upgraded = False
        self.attached = False  # the MQTT connection has its transport (served here)
        self._deadline: asyncio.TimerHandle | None = None
        self.accepted_at = now() if accepted_at is None else accepted_at
        self.replay = replay  # a handed-over client's bytes, upgrade request first
        self.request = bytearray()  # read before the upgrade
        self._trailing = b""
        self.lost = False
        self._replaying = False
        # Until the CONNECT says whose client this is (hand-over on): every byte read, and the
        # MQTT bytes held back from the connection.
        self.handover = handover
        self.deciding = handover is not None
        self.seen = bytearray()
        self.held = bytearray()
        self.peek: Reader | None = None
        self.handing = False  # the socket is on its way to the tenant's home worker

    def connection_made(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        door = self.broker.doorway.enter(peer[0] if isinstance(peer, tuple) else "")
        if door is None:  # too many strangers: refused before reading a byte
            self.transport = None
            transport.abort()
            return
        self.mqtt.door = door
        # One deadline from the accept, the upgrade included (the MQTT one starts at upgrade).
        loop = asyncio.get_running_loop()
        left = self.accepted_at + self.broker.config.connect_timeout - now()
        self._deadline = loop.call_later(max(0.0, left), self._too_slow)
        if self.replay:  # before the transport's first read: the handed bytes come first
            self._replaying = True
            try:
                self.data_received(self.replay)
            finally:
                self._replaying, self.replay = False, b""

    def _too_slow(self) -> None:
        if not self.mqtt.acked:
            self.close()

    def data_received(self, data: bytes) -> None:
        if self.handing:
            return
        if self.deciding:
            self.seen += data
        if not self.upgraded:
            self.request += data
        self._receive(data)
        if self._trailing:  # frames that came with the upgrade request (a replay's do)
            trailing, self._trailing = self._trailing, b""
            self._receive(trailing)

    def _receive(self, data: bytes) -> None:
        try:
            self.ws.receive_data(data)
            events = list(self.ws.events())
        except Exception as exc:  # a bad upgrade request (wsproto's RemoteProtocolError)
            self._refused(str(exc) or type(exc).__name__)
            self.close()
            return
        for event in events:
            if self.handing:
                return  # the rest went to the home with `seen`
            if isinstance(event, Request):
                self._upgrade(event)
            elif isinstance(event, BytesMessage):
                if self.deciding:
                    self._peek(bytes(event.data))
                else:
                    self.mqtt.data_received(bytes(event.data))
            elif isinstance(event, TextMessage):
                self._serve_here()
                self.mqtt._protocol_failure(
                    ReasonCode.MALFORMED_PACKET, "text frame on an MQTT WebSocket"
                )
            elif isinstance(event, Ping):
                self._raw(self.ws.send(event.response()))
            elif isinstance(event, CloseConnection):
                if event.code in FRAMING_ERRORS:  # wsproto's answer to a bad frame
                    self._refused(f"{event.reason or 'bad frame'} (close code {event.code})")
                try:
                    self._raw(self.ws.send(event.response()))
                except Exception:
                    pass
                self.close()

    def _upgrade(self, request: Request) -> None:
        path = request.target.split("?", 1)[0]
        if path != WS_PATH:
            self._raw(self.ws.send(RejectConnection(status_code=404)))
            self.close()
            return
        subprotocol = next((p for p in request.subprotocols if p in ("mqtt", "mqttv3.1")), None)
        accept = self.ws.send(AcceptConnection(subprotocol=subprotocol))
        if not self._replaying:  # a handed-over client had its answer from the landing worker
            self._raw(accept)
        self.upgraded = True
        # wsproto's server side keeps what followed the request in the same read to itself:
        # given again once the upgrade stands, the frames are read.
        end = END_OF_REQUEST.search(self.request)
        self._trailing = bytes(self.request[end.end() :]) if end else b""
        self.request = bytearray()
        if not self.deciding:
            self._attach()

    def _attach(self) -> None:
        self.attached = True
        self.mqtt.connection_made(_WebSocketTransport(self))

    def _peek(self, data: bytes) -> None:
        """MQTT bytes while the client's home is not known: held until its CONNECT is read."""
        assert self.handover is not None and self.transport is not None
        self.held += data
        if self.peek is None:
            self.peek = Reader(server_side=True, max_packet_size=self.broker.config.max_packet_size)
        try:
            packets = self.peek.feed(data)
        except MQTTError:  # the connection refuses it as it always has
            self._serve_here()
            return
        if not packets:
            return
        home = self.handover.home_of(packets[0], len(self.seen))
        if home is None:
            self._serve_here()
            return
        self.handing = True
        data = bytes(self.seen)
        hand_over(self.handover, self.transport, home, data, self.accepted_at, WS, self._handed)

    def _handed(self, handed: bool) -> None:
        assert self.handover is not None
        if handed:
            self._forget()
            return
        if self.lost:  # the client went meanwhile
            return
        self.handover.counts.failed += 1
        self.handing = False
        self._serve_here()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def _forget(self) -> None:
        """The home has the socket: this worker's descriptor goes, the connection does not."""
        if self._deadline is not None:
            self._deadline.cancel()
        door, self.mqtt.door = self.mqtt.door, None
        if door is not None:
            door.left()
        if self.transport is not None:
            self.transport.abort()

    def _serve_here(self) -> None:
        """The client is served by this worker: the connection gets what was held back."""
        if not self.deciding:
            return
        self.deciding = False
        self.seen = bytearray()
        held, self.held = bytes(self.held), bytearray()
        if self.upgraded and not self.attached:
            self._attach()
        if held and not self.mqtt.closing:
            self.mqtt.data_received(held)

    def _refused(self, reason: str) -> None:
        """Told to operators as a malformed packet (`refused.websocket`)."""
        peer = self.transport.get_extra_info("peername") if self.transport else None
        address = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else ""
        refused.websocket(self.mqtt, reason, address)

    def send_bytes(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self._raw(self.ws.send(BytesMessage(data=data)))

    def _raw(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if self._deadline is not None:
            self._deadline.cancel()
        if self.attached:
            self.mqtt.connection_lost(exc)
        elif self.mqtt.door is not None:
            self.mqtt.door.left()
            self.mqtt.door = None

    def pause_writing(self) -> None:
        if self.attached:
            self.mqtt.pause_writing()

    def resume_writing(self) -> None:
        if self.attached:
            self.mqtt.resume_writing()

"""MQTT over WebSocket (path `/mqtt`, subprotocol `mqtt`): wsproto does the HTTP upgrade and
framing; the MQTT bytes go to an ordinary `MQTTConnection` through a transport adapter."""

from __future__ import annotations

import asyncio
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

from common.mqtt.reason_codes import ReasonCode
from data_plane.broker import refused
from data_plane.broker.broker import Broker
from data_plane.broker.connection import MQTTConnection

WS_PATH = "/mqtt"
# The close codes wsproto answers a frame it cannot parse with (1002 protocol error: unmasked
# client frame, reserved bits, bad opcode, fragmented control frame…; 1007 invalid UTF-8; 1009
# too big): a framing error, a refusal operators see. A client's own close is not one.
FRAMING_ERRORS = frozenset({1002, 1007, 1009})


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
    def __init__(self, broker: Broker, transport_name: str = "ws") -> None:
        self.broker = broker
        self.ws = WSConnection(ConnectionType.SERVER)
        self.transport: asyncio.Transport | None = None
        self.mqtt = MQTTConnection(broker, transport_name=transport_name)
        self.upgraded = False
        self._deadline: asyncio.TimerHandle | None = None

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
        self._deadline = loop.call_later(self.broker.config.connect_timeout, self._too_slow)

    def _too_slow(self) -> None:
        if not self.mqtt.acked:
            self.close()

    def data_received(self, data: bytes) -> None:
        try:
            self.ws.receive_data(data)
            events = list(self.ws.events())
        except Exception as exc:  # a bad upgrade request (wsproto's RemoteProtocolError)
            self._refused(str(exc) or type(exc).__name__)
            self.close()
            return
        for event in events:
            if isinstance(event, Request):
                self._upgrade(event)
            elif isinstance(event, BytesMessage):
                self.mqtt.data_received(bytes(event.data))
            elif isinstance(event, TextMessage):
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
        self._raw(self.ws.send(AcceptConnection(subprotocol=subprotocol)))
        self.upgraded = True
        self.mqtt.connection_made(_WebSocketTransport(self))

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
        if self._deadline is not None:
            self._deadline.cancel()
        if self.upgraded:
            self.mqtt.connection_lost(exc)
        elif self.mqtt.door is not None:
            self.mqtt.door.left()

    def pause_writing(self) -> None:
        self.mqtt.pause_writing()

    def resume_writing(self) -> None:
        self.mqtt.resume_writing()

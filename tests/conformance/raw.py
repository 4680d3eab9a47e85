"""MQTT 3.1.1 / 5.0 packets as raw bytes, and a blocking socket client that reads them back.

Written from the OASIS texts (mqtt-v3.1.1-os chapters 1-3, mqtt-v5.0-os chapters 1-3), on purpose
without `common.mqtt`: the conformance tests must not share the broker's reading of the spec.
Builders take bytes wherever a test needs to send something ill-formed, and `flags=` overrides
fixed-header flags so reserved bits can be set exactly.
"""

from __future__ import annotations

import socket
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

# Control packet types (3.1.1 §2.2.1, 5.0 §2.1.2).
CONNECT, CONNACK, PUBLISH, PUBACK, PUBREC, PUBREL, PUBCOMP = range(1, 8)
SUBSCRIBE, SUBACK, UNSUBSCRIBE, UNSUBACK, PINGREQ, PINGRESP, DISCONNECT, AUTH = range(8, 16)
NAMES = {
    1: "CONNECT",
    2: "CONNACK",
    3: "PUBLISH",
    4: "PUBACK",
    5: "PUBREC",
    6: "PUBREL",
    7: "PUBCOMP",
    8: "SUBSCRIBE",
    9: "SUBACK",
    10: "UNSUBSCRIBE",
    11: "UNSUBACK",
    12: "PINGREQ",
    13: "PINGRESP",
    14: "DISCONNECT",
    15: "AUTH",
}
V311, V5 = 4, 5

# -- data representation (3.1.1 §1.5, 5.0 §1.5) -----------------------------------------------


def vbi(value: int) -> bytes:
    """Variable Byte Integer: 7 bits per byte, high bit = more follows (5.0 §1.5.5)."""
    out = bytearray()
    while True:
        byte, value = value % 128, value // 128
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def read_vbi(data: bytes, pos: int) -> tuple[int, int]:
    value = 0
    for shift in range(0, 28, 7):
        byte = data[pos]
        pos += 1
        value += (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
    raise ValueError("variable byte integer longer than 4 bytes")


def u16(value: int) -> bytes:
    return value.to_bytes(2, "big")


def u32(value: int) -> bytes:
    return value.to_bytes(4, "big")


def utf8(text: str | bytes) -> bytes:
    """UTF-8 Encoded String: 2-byte length then the bytes (bytes are sent as given)."""
    raw = text.encode("utf-8") if isinstance(text, str) else text
    return u16(len(raw)) + raw


def binary(data: bytes) -> bytes:
    return u16(len(data)) + data


def frame(kind: int, flags: int, body: bytes) -> bytes:
    """Fixed header (type << 4 | flags, Remaining Length) followed by the rest."""
    return bytes(((kind << 4) | flags,)) + vbi(len(body)) + body


# -- properties (5.0 §2.2.2, Table 2-4) ------------------------------------------------------

PAYLOAD_FORMAT_INDICATOR = 0x01
MESSAGE_EXPIRY_INTERVAL = 0x02
CONTENT_TYPE = 0x03
RESPONSE_TOPIC = 0x08
CORRELATION_DATA = 0x09
SUBSCRIPTION_IDENTIFIER = 0x0B
SESSION_EXPIRY_INTERVAL = 0x11
ASSIGNED_CLIENT_IDENTIFIER = 0x12
SERVER_KEEP_ALIVE = 0x13
AUTHENTICATION_METHOD = 0x15
AUTHENTICATION_DATA = 0x16
REQUEST_PROBLEM_INFORMATION = 0x17
WILL_DELAY_INTERVAL = 0x18
REQUEST_RESPONSE_INFORMATION = 0x19
RESPONSE_INFORMATION = 0x1A
SERVER_REFERENCE = 0x1C
REASON_STRING = 0x1F
RECEIVE_MAXIMUM = 0x21
TOPIC_ALIAS_MAXIMUM = 0x22
TOPIC_ALIAS = 0x23
MAXIMUM_QOS = 0x24
RETAIN_AVAILABLE = 0x25
USER_PROPERTY = 0x26
MAXIMUM_PACKET_SIZE = 0x27
WILDCARD_SUBSCRIPTION_AVAILABLE = 0x28
SUBSCRIPTION_IDENTIFIER_AVAILABLE = 0x29
SHARED_SUBSCRIPTION_AVAILABLE = 0x2A

BYTE, TWO, FOUR, VAR, STRING, BINARY, PAIR = range(7)
PROPERTY_TYPES = {
    PAYLOAD_FORMAT_INDICATOR: BYTE,
    MESSAGE_EXPIRY_INTERVAL: FOUR,
    CONTENT_TYPE: STRING,
    RESPONSE_TOPIC: STRING,
    CORRELATION_DATA: BINARY,
    SUBSCRIPTION_IDENTIFIER: VAR,
    SESSION_EXPIRY_INTERVAL: FOUR,
    ASSIGNED_CLIENT_IDENTIFIER: STRING,
    SERVER_KEEP_ALIVE: TWO,
    AUTHENTICATION_METHOD: STRING,
    AUTHENTICATION_DATA: BINARY,
    REQUEST_PROBLEM_INFORMATION: BYTE,
    WILL_DELAY_INTERVAL: FOUR,
    REQUEST_RESPONSE_INFORMATION: BYTE,
    RESPONSE_INFORMATION: STRING,
    SERVER_REFERENCE: STRING,
    REASON_STRING: STRING,
    RECEIVE_MAXIMUM: TWO,
    TOPIC_ALIAS_MAXIMUM: TWO,
    TOPIC_ALIAS: TWO,
    MAXIMUM_QOS: BYTE,
    RETAIN_AVAILABLE: BYTE,
    USER_PROPERTY: PAIR,
    MAXIMUM_PACKET_SIZE: FOUR,
    WILDCARD_SUBSCRIPTION_AVAILABLE: BYTE,
    SUBSCRIPTION_IDENTIFIER_AVAILABLE: BYTE,
    SHARED_SUBSCRIPTION_AVAILABLE: BYTE,
}

Props = list[tuple[int, Any]]  # (identifier, value), in order; duplicates allowed on purpose


def prop(identifier: int, value: Any) -> bytes:
    kind = PROPERTY_TYPES[identifier]
    head = vbi(identifier)
    if kind == BYTE:
        return head + bytes((value,))
    if kind == TWO:
        return head + u16(value)
    if kind == FOUR:
        return head + u32(value)
    if kind == VAR:
        return head + vbi(value)
    if kind == STRING:
        return head + utf8(value)
    if kind == BINARY:
        return head + binary(value)
    return head + utf8(value[0]) + utf8(value[1])


def props(items: Props | None = None) -> bytes:
    """A property block: Property Length (VBI) then the properties."""
    body = b"".join(prop(i, v) for i, v in items or ())
    return vbi(len(body)) + body


def read_props(data: bytes, pos: int) -> tuple[dict[int, list], int]:
    length, pos = read_vbi(data, pos)
    end = pos + length
    out: dict[int, list] = {}
    while pos < end:
        identifier, pos = read_vbi(data, pos)
        kind = PROPERTY_TYPES[identifier]
        if kind == BYTE:
            value: Any = data[pos]
            pos += 1
        elif kind == TWO:
            value = int.from_bytes(data[pos : pos + 2], "big")
            pos += 2
        elif kind == FOUR:
            value = int.from_bytes(data[pos : pos + 4], "big")
            pos += 4
        elif kind == VAR:
            value, pos = read_vbi(data, pos)
        elif kind == BINARY:
            size = int.from_bytes(data[pos : pos + 2], "big")
            value, pos = data[pos + 2 : pos + 2 + size], pos + 2 + size
        else:
            strings = []
            for _ in range(2 if kind == PAIR else 1):
                size = int.from_bytes(data[pos : pos + 2], "big")
                strings.append(data[pos + 2 : pos + 2 + size].decode("utf-8"))
                pos += 2 + size
            value = tuple(strings) if kind == PAIR else strings[0]
        out.setdefault(identifier, []).append(value)
    assert pos == end, "property block overran its length"
    return out, end


# -- packets a client sends ------------------------------------------------------------------


@dataclass
class Will:
    topic: str | bytes
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    properties: Props = field(default_factory=list)


def connect(
    client_id: str | bytes = "",
    *,
    version: int = V311,
    username: str | bytes | None = "acme/d1",
    password: bytes | str | None = b"pw1",
    clean: bool = True,
    keep_alive: int = 60,
    will: Will | None = None,
    properties: Props | None = None,
    flags: int | None = None,
    name: bytes = b"MQTT",
    level: int | None = None,
    tail: bytes = b"",
) -> bytes:
    """CONNECT (3.1.1 §3.1, 5.0 §3.1). `flags` replaces the computed Connect Flags byte;
    `tail` is appended to the payload (to send fields the flags do not announce)."""
    if flags is None:
        flags = 0x02 if clean else 0
        if will is not None:
            flags |= 0x04 | (will.qos << 3) | (0x20 if will.retain else 0)
        if password is not None:
            flags |= 0x40
        if username is not None:
            flags |= 0x80
    body = utf8(name) + bytes((version if level is None else level, flags)) + u16(keep_alive)
    if version == V5:
        body += props(properties)
    body += utf8(client_id)
    if will is not None:
        if version == V5:
            body += props(will.properties)
        body += utf8(will.topic) + binary(will.payload)
    if username is not None:
        body += utf8(username)
    if password is not None:
        body += binary(password.encode() if isinstance(password, str) else password)
    return frame(CONNECT, 0, body + tail)


def publish(
    topic: str | bytes,
    payload: bytes = b"",
    *,
    qos: int = 0,
    retain: bool = False,
    dup: bool = False,
    packet_id: int | None = None,
    version: int = V311,
    properties: Props | None = None,
    flags: int | None = None,
) -> bytes:
    """PUBLISH (§3.3). A packet id is included whenever given (so QoS 0 can carry one)."""
    if flags is None:
        flags = (0x08 if dup else 0) | (qos << 1) | (0x01 if retain else 0)
    body = utf8(topic)
    if packet_id is not None:
        body += u16(packet_id)
    if version == V5:
        body += props(properties)
    return frame(PUBLISH, flags, body + payload)


def ack(
    kind: int,
    packet_id: int,
    reason: int | None = None,
    *,
    properties: Props | None = None,
    flags: int | None = None,
) -> bytes:
    """PUBACK/PUBREC/PUBREL/PUBCOMP (§3.4-3.7); reason and properties are 5.0 only."""
    body = u16(packet_id)
    if reason is not None or properties is not None:
        body += bytes((reason or 0,))
        if properties is not None:
            body += props(properties)
    if flags is None:
        flags = 0x02 if kind == PUBREL else 0
    return frame(kind, flags, body)


def subscribe(
    packet_id: int,
    filters: list[tuple[str | bytes, int]],
    *,
    version: int = V311,
    properties: Props | None = None,
    flags: int = 0x02,
) -> bytes:
    """SUBSCRIBE (§3.8): (topic filter, options byte) pairs; on 3.1.1 the byte is the QoS."""
    body = u16(packet_id)
    if version == V5:
        body += props(properties)
    for topic_filter, options in filters:
        body += utf8(topic_filter) + bytes((options,))
    return frame(SUBSCRIBE, flags, body)


def unsubscribe(
    packet_id: int,
    filters: list[str | bytes],
    *,
    version: int = V311,
    properties: Props | None = None,
    flags: int = 0x02,
) -> bytes:
    body = u16(packet_id)
    if version == V5:
        body += props(properties)
    return frame(UNSUBSCRIBE, flags, body + b"".join(utf8(f) for f in filters))


def pingreq(flags: int = 0) -> bytes:
    return frame(PINGREQ, flags, b"")


def disconnect(
    reason: int | None = None, *, properties: Props | None = None, flags: int = 0
) -> bytes:
    body = b""
    if reason is not None or properties is not None:
        body = bytes((reason or 0,))
        if properties is not None:
            body += props(properties)
    return frame(DISCONNECT, flags, body)


def options(
    qos: int,
    *,
    no_local: bool = False,
    retain_as_published: bool = False,
    retain_handling: int = 0,
) -> int:
    """5.0 Subscription Options byte (§3.8.3.1)."""
    return (
        qos
        | (0x04 if no_local else 0)
        | (0x08 if retain_as_published else 0)
        | (retain_handling << 4)
    )


# -- packets a client receives ---------------------------------------------------------------


@dataclass
class Packet:
    """A received control packet, decoded as far as its type allows."""

    type: int
    flags: int
    body: bytes
    size: int  # whole packet, fixed header included
    packet_id: int | None = None
    reason: int = 0
    codes: list[int] = field(default_factory=list)
    properties: dict[int, list] = field(default_factory=dict)
    session_present: bool = False
    ack_flags: int = 0
    topic: str = ""
    payload: bytes = b""
    qos: int = 0
    dup: bool = False
    retain: bool = False

    @property
    def name(self) -> str:
        return NAMES.get(self.type, str(self.type))

    def prop(self, identifier: int, default: Any = None) -> Any:
        values = self.properties.get(identifier)
        return values[0] if values else default

    def __repr__(self) -> str:
        return f"<{self.name} flags={self.flags:#x} body={self.body[:40]!r}>"


def decode(first: int, body: bytes, size: int, version: int) -> Packet:
    kind, flags = first >> 4, first & 0x0F
    p = Packet(kind, flags, body, size)
    v5 = version == V5
    if kind == CONNACK:
        p.ack_flags, p.reason = body[0], body[1]
        p.session_present = bool(body[0] & 0x01)
        if v5 and len(body) > 2:
            p.properties, _ = read_props(body, 2)
    elif kind == PUBLISH:
        p.qos, p.dup, p.retain = (flags >> 1) & 0x03, bool(flags & 0x08), bool(flags & 0x01)
        size_ = int.from_bytes(body[:2], "big")
        p.topic = body[2 : 2 + size_].decode("utf-8")
        pos = 2 + size_
        if p.qos:
            p.packet_id, pos = int.from_bytes(body[pos : pos + 2], "big"), pos + 2
        if v5:
            p.properties, pos = read_props(body, pos)
        p.payload = body[pos:]
    elif kind in (PUBACK, PUBREC, PUBREL, PUBCOMP):
        p.packet_id = int.from_bytes(body[:2], "big")
        if len(body) > 2:
            p.reason = body[2]
        if len(body) > 3:
            p.properties, _ = read_props(body, 3)
    elif kind in (SUBACK, UNSUBACK):
        p.packet_id = int.from_bytes(body[:2], "big")
        pos = 2
        if v5:
            p.properties, pos = read_props(body, 2)
        p.codes = list(body[pos:])
    elif kind in (DISCONNECT, AUTH):
        if body:
            p.reason = body[0]
        if len(body) > 1:
            p.properties, _ = read_props(body, 1)
    return p


class Closed(Exception):
    """The server closed the connection."""


class Client:
    """One TCP connection; reads are bounded by deadlines, never by sleeps."""

    def __init__(self, port: int, version: int = V311, host: str = "127.0.0.1") -> None:
        self.version = version
        self.sock = socket.create_connection((host, port), timeout=5)
        self.buffer = bytearray()
        self.eof = False

    def send(self, *chunks: bytes) -> None:
        self.sock.sendall(b"".join(chunks))

    def try_send(self, data: bytes) -> bool:
        """Send when the server may already have closed; False if it had."""
        try:
            self.sock.sendall(data)
            return True
        except OSError:
            return False

    def _complete(self) -> Packet | None:
        buf = self.buffer
        if len(buf) < 2:
            return None
        length, pos, shift = 0, 1, 0
        while True:
            if pos >= len(buf):
                return None
            byte = buf[pos]
            pos += 1
            length += (byte & 0x7F) << shift
            if not byte & 0x80:
                break
            shift += 7
        if len(buf) < pos + length:
            return None
        packet = decode(buf[0], bytes(buf[pos : pos + length]), pos + length, self.version)
        del buf[: pos + length]
        return packet

    def read(self, timeout: float = 2.0) -> Packet:
        """The next packet; `TimeoutError` if none within `timeout`, `Closed` at EOF."""
        deadline = time.monotonic() + timeout
        while True:
            packet = self._complete()
            if packet is not None:
                return packet
            if self.eof:
                raise Closed()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no packet within {timeout} s")
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except (ConnectionResetError, BrokenPipeError):
                data = b""
            if not data:
                self.eof = True
            self.buffer += data

    def expect(self, kind: int, timeout: float = 2.0) -> Packet:
        packet = self.read(timeout)
        assert packet.type == kind, f"expected {NAMES[kind]}, got {packet!r}"
        return packet

    def silent(self, duration: float = 0.3) -> None:
        """Assert nothing arrives (and the connection stays open) for `duration`."""
        try:
            packet = self.read(duration)
        except TimeoutError:
            return
        raise AssertionError(f"unexpected {packet!r}")

    def closed(self, timeout: float = 3.0) -> list[Packet]:
        """Wait for the server to close; the packets it sent first. Fails if it stays open."""
        deadline = time.monotonic() + timeout
        seen: list[Packet] = []
        while True:
            try:
                seen.append(self.read(max(0.0, deadline - time.monotonic())))
            except Closed:
                return seen
            except TimeoutError:
                raise AssertionError(
                    f"connection still open after {timeout} s; got {seen}"
                ) from None

    def barrier(self) -> list[Packet]:
        """PINGREQ, and what arrives before its PINGRESP: everything the server had sent this
        client by the time it read the PINGREQ (packets are handled in order)."""
        self.send(pingreq())
        seen = []
        while True:
            packet = self.read()
            if packet.type == PINGRESP:
                return seen
            seen.append(packet)

    def until_marker(self, marker: bytes = b"marker", timeout: float = 3.0) -> list[Packet]:
        """What arrives before the PUBLISH whose payload is `marker`, acknowledging QoS 1/2
        PUBLISHes (PUBACK, PUBREC then PUBCOMP) as a client must."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            packet = self.read(max(0.01, deadline - time.monotonic()))
            if packet.type == PUBLISH and packet.qos == 1:
                self.send(ack(PUBACK, packet.packet_id))
            elif packet.type == PUBLISH and packet.qos == 2:
                self.send(ack(PUBREC, packet.packet_id))
            elif packet.type == PUBREL:
                self.send(ack(PUBCOMP, packet.packet_id))
                continue
            if packet.type == PUBLISH and packet.payload == marker:
                return seen
            seen.append(packet)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def uid() -> str:
    """A short unique token for client ids and topics (the broker is shared by a module)."""
    return uuid.uuid4().hex[:10]

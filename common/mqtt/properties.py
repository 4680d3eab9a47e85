"""MQTT 5.0 properties (section 2.2.2.2): identifiers, types, where each is allowed; encode/decode.

Properties are dicts keyed by snake_case name. `user_property` is a list of (key, value) pairs;
`subscription_identifier` is a list of ints (several may occur in a PUBLISH to a client).
"""

from __future__ import annotations

from typing import Any

from common.mqtt.errors import MalformedPacket, ProtocolError
from common.mqtt.packets import PacketType

WILL = 0  # pseudo packet type: the will properties inside CONNECT

BYTE, U16, U32, VARINT, STR, BIN, PAIR = range(7)

_P = PacketType
_ALL = frozenset({*PacketType, WILL})
_ACKS = frozenset({_P.PUBACK, _P.PUBREC, _P.PUBREL, _P.PUBCOMP})

# id: (name, type, packets where allowed)
PROPERTIES: dict[int, tuple[str, int, frozenset[Any]]] = {
    0x01: ("payload_format_indicator", BYTE, frozenset({_P.PUBLISH, WILL})),
    0x02: ("message_expiry_interval", U32, frozenset({_P.PUBLISH, WILL})),
    0x03: ("content_type", STR, frozenset({_P.PUBLISH, WILL})),
    0x08: ("response_topic", STR, frozenset({_P.PUBLISH, WILL})),
    0x09: ("correlation_data", BIN, frozenset({_P.PUBLISH, WILL})),
    0x0B: ("subscription_identifier", VARINT, frozenset({_P.PUBLISH, _P.SUBSCRIBE})),
    0x11: ("session_expiry_interval", U32, frozenset({_P.CONNECT, _P.CONNACK, _P.DISCONNECT})),
    0x12: ("assigned_client_identifier", STR, frozenset({_P.CONNACK})),
    0x13: ("server_keep_alive", U16, frozenset({_P.CONNACK})),
    0x15: ("authentication_method", STR, frozenset({_P.CONNECT, _P.CONNACK, _P.AUTH})),
    0x16: ("authentication_data", BIN, frozenset({_P.CONNECT, _P.CONNACK, _P.AUTH})),
    0x17: ("request_problem_information", BYTE, frozenset({_P.CONNECT})),
    0x18: ("will_delay_interval", U32, frozenset({WILL})),
    0x19: ("request_response_information", BYTE, frozenset({_P.CONNECT})),
    0x1A: ("response_information", STR, frozenset({_P.CONNACK})),
    0x1C: ("server_reference", STR, frozenset({_P.CONNACK, _P.DISCONNECT})),
    0x1F: (
        "reason_string",
        STR,
        frozenset({_P.CONNACK, *_ACKS, _P.SUBACK, _P.UNSUBACK, _P.DISCONNECT, _P.AUTH}),
    ),
    0x21: ("receive_maximum", U16, frozenset({_P.CONNECT, _P.CONNACK})),
    0x22: ("topic_alias_maximum", U16, frozenset({_P.CONNECT, _P.CONNACK})),
    0x23: ("topic_alias", U16, frozenset({_P.PUBLISH})),
    0x24: ("maximum_qos", BYTE, frozenset({_P.CONNACK})),
    0x25: ("retain_available", BYTE, frozenset({_P.CONNACK})),
    0x26: ("user_property", PAIR, _ALL),
    0x27: ("maximum_packet_size", U32, frozenset({_P.CONNECT, _P.CONNACK})),
    0x28: ("wildcard_subscription_available", BYTE, frozenset({_P.CONNACK})),
    0x29: ("subscription_identifier_available", BYTE, frozenset({_P.CONNACK})),
    0x2A: ("shared_subscription_available", BYTE, frozenset({_P.CONNACK})),
}
IDS = {name: (pid, kind) for pid, (name, kind, _) in PROPERTIES.items()}
PROPERTY_NAMES = frozenset(IDS)
MULTI = frozenset({"user_property", "subscription_identifier"})
_BOOLEAN = frozenset(
    {
        "payload_format_indicator",
        "request_problem_information",
        "request_response_information",
        "maximum_qos",
        "retain_available",
        "wildcard_subscription_available",
        "subscription_identifier_available",
        "shared_subscription_available",
    }
)
_NON_ZERO = frozenset(
    {"receive_maximum", "maximum_packet_size", "subscription_identifier", "topic_alias"}
)


def read_varint(data: bytes, offset: int) -> tuple[int, int]:
    value = 0
    shift = 0
    for index in range(4):
        if offset + index >= len(data):
            raise MalformedPacket("truncated variable byte integer")
        byte = data[offset + index]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset + index + 1
        shift += 7
    raise MalformedPacket("variable byte integer longer than 4 bytes")


def encode_varint(value: int) -> bytes:
    if value < 128:
        return bytes((value,))
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def read_u16(data: bytes, offset: int) -> tuple[int, int]:
    if offset + 2 > len(data):
        raise MalformedPacket("truncated two-byte integer")
    return (data[offset] << 8) | data[offset + 1], offset + 2


def read_binary(data: bytes, offset: int) -> tuple[bytes, int]:
    length, offset = read_u16(data, offset)
    end = offset + length
    if end > len(data):
        raise MalformedPacket("truncated binary data")
    return bytes(data[offset:end]), end


def read_string(data: bytes, offset: int) -> tuple[str, int]:
    raw, offset = read_binary(data, offset)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedPacket("string is not well-formed UTF-8") from None
    if "\x00" in text:
        raise MalformedPacket("string contains U+0000")
    return text, offset


def encode_string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return len(raw).to_bytes(2, "big") + raw


def encode_binary(raw: bytes) -> bytes:
    return len(raw).to_bytes(2, "big") + raw


def read_properties(data: bytes, offset: int, packet_type: int) -> tuple[dict[str, Any], int]:
    length, offset = read_varint(data, offset)
    end = offset + length
    if end > len(data):
        raise MalformedPacket("property length exceeds the packet")
    properties: dict[str, Any] = {}
    while offset < end:
        pid, offset = read_varint(data, offset)
        spec = PROPERTIES.get(pid)
        if spec is None:
            raise MalformedPacket(f"unknown property identifier {pid:#x}")
        name, kind, allowed = spec
        if packet_type not in allowed:
            # 5.0 §2.2.2.2: an identifier not valid for the packet type is a Malformed Packet.
            raise MalformedPacket(f"property {name} is not allowed in this packet")
        if kind == BYTE:
            if offset >= end:
                raise MalformedPacket("truncated property")
            value: Any = data[offset]
            offset += 1
        elif kind == U16:
            value, offset = read_u16(data, offset)
        elif kind == U32:
            if offset + 4 > end:
                raise MalformedPacket("truncated property")
            value = int.from_bytes(data[offset : offset + 4], "big")
            offset += 4
        elif kind == VARINT:
            value, offset = read_varint(data, offset)
        elif kind == STR:
            value, offset = read_string(data, offset)
        elif kind == BIN:
            value, offset = read_binary(data, offset)
        else:
            key, offset = read_string(data, offset)
            pair_value, offset = read_string(data, offset)
            value = (key, pair_value)
        if offset > end:
            raise MalformedPacket("property runs past the property length")
        if name in _BOOLEAN and value > 1:
            raise ProtocolError(f"{name} must be 0 or 1")
        if name in _NON_ZERO and value == 0:
            raise ProtocolError(f"{name} must not be 0")
        if name in MULTI:
            properties.setdefault(name, []).append(value)
        elif name in properties:
            raise ProtocolError(f"property {name} appears twice")
        else:
            properties[name] = value
    return properties, end


def encode_properties(properties: dict[str, Any] | None, packet_type: int = 0) -> bytes:
    """Property block (length + properties). Unknown names are a programming error."""
    if not properties:
        return b"\x00"
    out = bytearray()
    for name, value in properties.items():
        if value is None:
            continue
        pid, kind = IDS[name]
        values = value if name in MULTI else (value,)
        for item in values:
            out += encode_varint(pid)
            if kind == BYTE:
                out.append(int(item))
            elif kind == U16:
                out += int(item).to_bytes(2, "big")
            elif kind == U32:
                out += int(item).to_bytes(4, "big")
            elif kind == VARINT:
                out += encode_varint(int(item))
            elif kind == STR:
                out += encode_string(item)
            elif kind == BIN:
                out += encode_binary(bytes(item))
            else:
                out += encode_string(item[0]) + encode_string(item[1])
    return encode_varint(len(out)) + bytes(out)

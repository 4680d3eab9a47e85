"""Forwarded messages on the bus: a batch of messages as one byte string, and back.

One entry of a node's forward stream carries many messages (forwarding is batched), each as:

    flags u8 | qos u8 | retain u8 | expiry_ms i32 (-1: none) | units u32
    | lengths of tenant, topic, publisher, device (u16 each), of properties and payload (u32)
    tenant, topic, publisher, device (UTF-8), properties (the MQTT 5 property block, the
    broker's own codec; empty when none), payload
    shared groups this node serves for it: u16 count, then (filter, group) as u16-length texts
    origin count u64 (the publishing node's running count of its publishes, 0: unknown)

A message whose expiry is over 2^31 ms away (MQTT 5 allows 2^32 - 1 s, some 136 years) or
that serves over 65,535 groups is written `WIDE` (a flag of the codec's own, never returned):
expiry_ms i64 and the group count u32. Only such messages are: nodes of the version before it
read every other message as they did (a rolling upgrade), and this one reads both.

Every other field holds what MQTT allows: topics, client ids and texts are MQTT strings (at most
65,535 bytes), a payload and a property block fit a packet (at most 256 MiB), units are 5 KiB
of such a packet, and the MQTT 5 properties travel in MQTT's own encoding.

`flags` says what the receiving node does with it (`DELIVER`: to its matching subscribers;
`RETAIN`: into its in-memory retained store). The message expiry travels as the time that
remains (monotonic clocks are per process). The origin count with the node that published the
message (the stream entry's writer; for a relayed copy the pair's second text) identifies it
across copies: data_plane.cluster.exactly. No pickle: the bus is shared infrastructure and a
batch is only ever data.
"""

from __future__ import annotations

import struct
import time

from common.mqtt.packets import PacketType, Properties
from common.mqtt.properties import encode_properties, read_properties
from data_plane.broker.message import Message

DELIVER = 1  # route it to the node's local subscribers
RETAIN = 2  # keep it in the node's retained store (retained messages are cluster-wide)
# For one session only (a relay's, see data_plane.cluster.relay): the "groups" carry one pair,
# (client id, node the message was published at).
TARGET = 4
# A dead node's share of a shared-group message handed on by the survivor (data_plane.cluster.
# regroup): the receiving node serves the groups named only, not its plain subscribers.
GROUPS = 8
# A shared group's hand-over between nodes (data_plane.cluster.handover): a node where the group
# got a member asks a node that keeps it to hand over what it keeps (`HANDOVER_ASK`), which
# answers once the last kept copy is on the same stream (`HANDOVER_DONE`). The message is a
# marker of the tenant; the "groups" carry the group's (filter, name).
HANDOVER_ASK = 16
HANDOVER_DONE = 32
WIDE = 0x80  # the codec's own: this message's head and group count are the wide ones

_HEAD = struct.Struct("!BBBiIHHHHII")
_WIDE_HEAD = struct.Struct("!BBBqIHHHHII")
_MAX_I32 = 2**31 - 1
_MAX_U16 = 2**16 - 1
_U16 = struct.Struct("!H")
_U32 = struct.Struct("!I")
_U64 = struct.Struct("!Q")
# (head, flag bit, group count, an empty group count) of each layout
_NARROW = (_HEAD, 0, _U16, b"\x00\x00")
_WIDENED = (_WIDE_HEAD, WIDE, _U32, b"\x00\x00\x00\x00")


def _text(value: str) -> bytes:
    raw = value.encode()
    return _U16.pack(len(raw)) + raw


def encode(
    message: Message,
    flags: int,
    groups: tuple[tuple[str, str], ...] = (),
    now: float | None = None,
    seq: int = 0,
) -> bytes:
    expiry = -1
    layout = _NARROW
    if message.expires_at is not None:
        remaining = message.expires_at - (now if now is not None else time.monotonic())
        expiry = max(0, int(remaining * 1000))
        if expiry > _MAX_I32:
            layout = _WIDENED
    if groups and len(groups) > _MAX_U16:
        layout = _WIDENED
    head_format, wide, count_format, no_groups = layout
    props = encode_properties(message.properties) if message.properties else b""
    tenant = message.tenant.encode()
    topic = message.topic.encode()
    publisher = message.publisher.encode()
    device = message.device.encode()
    payload = message.payload
    head = head_format.pack(
        flags | wide,
        message.qos,
        message.retain,
        expiry,
        message.units,
        len(tenant),
        len(topic),
        len(publisher),
        len(device),
        len(props),
        len(payload),
    )
    origin = _U64.pack(seq)
    if not groups:
        return b"".join((head, tenant, topic, publisher, device, props, payload, no_groups, origin))
    tail = b"".join(_text(topic_filter) + _text(group) for topic_filter, group in groups)
    count = count_format.pack(len(groups))
    return b"".join((head, tenant, topic, publisher, device, props, payload, count, tail, origin))


Groups = frozenset[tuple[str, str]]
# One decoded message of a batch: (flags, message, groups to serve, origin count).
Counted = tuple[int, Message, Groups, int]
# A stream entry as XREADGROUP/XAUTOCLAIM give it: (entry id, fields).
StreamEntry = tuple[bytes, dict[bytes, bytes]]
NO_GROUPS: Groups = frozenset()


def decode(batch: bytes, now: float | None = None) -> list[tuple[int, Message, Groups]]:
    """Every (flags, message, groups to serve) of a batch, in the order they were published."""
    return [(flags, message, groups) for flags, message, groups, _ in decode_counted(batch, now)]


def decode_counted(batch: bytes, now: float | None = None) -> list[Counted]:
    """Every (flags, message, groups, origin count) of a batch, in the order published."""
    now = now if now is not None else time.monotonic()
    view = memoryview(batch)
    out: list[tuple[int, Message, Groups, int]] = []
    offset = 0
    end = len(batch)
    while offset < end:
        wide = view[offset] & WIDE
        head = _WIDE_HEAD if wide else _HEAD
        (flags, qos, retain, expiry, units, *lengths) = head.unpack_from(view, offset)
        flags &= ~WIDE
        offset += head.size
        texts = []
        for length in lengths[:4]:
            texts.append(str(view[offset : offset + length], "utf-8"))
            offset += length
        tenant, topic, publisher, device = texts
        length = lengths[4]
        properties: Properties = {}
        if length:
            block = bytes(view[offset : offset + length])
            properties, _ = read_properties(block, 0, PacketType.PUBLISH)
        offset += length
        length = lengths[5]
        payload = bytes(view[offset : offset + length])
        offset += length
        (count,) = (_U32 if wide else _U16).unpack_from(view, offset)
        offset += 4 if wide else 2
        names = []
        for _ in range(count * 2):
            (length,) = _U16.unpack_from(view, offset)
            offset += 2
            names.append(bytes(view[offset : offset + length]).decode())
            offset += length
        groups = frozenset(zip(names[::2], names[1::2], strict=True)) if count else NO_GROUPS
        (seq,) = _U64.unpack_from(view, offset)
        offset += 8
        message = Message(
            topic,
            payload,
            qos,
            bool(retain),
            properties,
            now + expiry / 1000 if expiry >= 0 else None,
            publisher,
            tenant,
            device,
            units,
        )
        out.append((flags, message, groups, seq))
    return out

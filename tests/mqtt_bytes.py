"""MQTT wire pieces written by hand, for tests that speak raw bytes to the broker: independent
of the codec under test (`common.mqtt`), so a codec bug cannot hide itself."""

from __future__ import annotations

import struct


def varint(value: int) -> bytes:
    """A Variable Byte Integer (MQTT 5.0 §1.5.5): remaining lengths, property lengths."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def string(text: str | bytes) -> bytes:
    """A UTF-8 Encoded String (§1.5.4): two length bytes, then the bytes."""
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("!H", len(raw)) + raw

"""Errors the codec raises; each carries the MQTT 5.0 reason code the connection closes with."""

from __future__ import annotations


class MQTTError(Exception):
    """A violation that ends the connection. `reason_code` goes into DISCONNECT (5.0) or,
    before CONNACK, into CONNACK; on 3.1.1 the connection is simply closed."""

    reason_code: int = 0x81

    def __init__(self, message: str, reason_code: int | None = None) -> None:
        super().__init__(message)
        if reason_code is not None:
            self.reason_code = reason_code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class MalformedPacket(MQTTError):
    reason_code = 0x81


class ProtocolError(MQTTError):
    reason_code = 0x82


class UnsupportedProtocolVersion(MQTTError):
    """CONNECT with a protocol level we do not speak: CONNACK 0x84 (5.0) / 0x01 (3.1.1)."""

    reason_code = 0x84


class PacketTooLarge(MQTTError):
    reason_code = 0x95


class TopicNameInvalid(MQTTError):
    reason_code = 0x90


class TopicFilterInvalid(MQTTError):
    reason_code = 0x8F

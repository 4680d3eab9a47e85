"""Errors the codec raises; each carries the MQTT 5.0 reason code the connection closes with."""

from __future__ import annotations

from common.mqtt.reason_codes import ReasonCode


class MQTTError(Exception):
    """A violation that ends the connection. `reason_code` goes into DISCONNECT (5.0) or,
    before CONNACK, into CONNACK; on 3.1.1 the connection is simply closed."""

    reason_code: int = ReasonCode.MALFORMED_PACKET

    def __init__(self, message: str, reason_code: int | None = None) -> None:
        super().__init__(message)
        if reason_code is not None:
            self.reason_code = reason_code

    @property
    def message(self) -> str:
        return str(self.args[0]) if self.args else ""


class MalformedPacket(MQTTError):
    reason_code = ReasonCode.MALFORMED_PACKET


class ProtocolError(MQTTError):
    reason_code = ReasonCode.PROTOCOL_ERROR


class UnsupportedProtocolVersion(MQTTError):
    """CONNECT with a protocol level we do not speak: CONNACK 0x84 (5.0) / 0x01 (3.1.1)."""

    reason_code = ReasonCode.UNSUPPORTED_PROTOCOL_VERSION


class PacketTooLarge(MQTTError):
    reason_code = ReasonCode.PACKET_TOO_LARGE


class TopicNameInvalid(MQTTError):
    reason_code = ReasonCode.TOPIC_NAME_INVALID


class TopicFilterInvalid(MQTTError):
    reason_code = ReasonCode.TOPIC_FILTER_INVALID

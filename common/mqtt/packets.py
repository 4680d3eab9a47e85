"""MQTT control packets as small event classes, shared by the codec and the broker.

This module is the contract between the sans-IO codec (`common.mqtt.codec`) and the rest of
the broker: the codec turns bytes into these objects and back, nothing else creates wire bytes.

Conventions
- Strings (topics, client ids, usernames) are `str`; binary data (payloads, passwords,
  correlation data, authentication data) is `bytes`.
- MQTT 5.0 properties are a plain `dict` keyed by the snake_case property name (see
  `common.mqtt.properties.PROPERTY_NAMES`). Properties that may occur more than once hold a
  list: `user_property` is `list[tuple[str, str]]`, `subscription_identifier` is `list[int]`.
  On MQTT 3.1.1 connections the dict is always empty and ignored by the encoder.
- `reason_code` is an `int` (see `common.mqtt.reason_codes.ReasonCode`); on 3.1.1 the codec
  maps it to the 3.1.1 return code where the packet has one (CONNACK, SUBACK).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

MQTT_3_1_1 = 4
MQTT_5_0 = 5


class PacketType(IntEnum):
    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


Properties = dict[str, Any]


@dataclass(slots=True)
class Will:
    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties = field(default_factory=dict)


@dataclass(slots=True)
class Connect:
    client_id: str
    protocol_version: int = MQTT_3_1_1
    protocol_name: str = "MQTT"
    clean_start: bool = True
    keep_alive: int = 60
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = field(default_factory=dict)
    type = PacketType.CONNECT


@dataclass(slots=True)
class Connack:
    session_present: bool = False
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)
    type = PacketType.CONNACK


@dataclass(slots=True)
class Publish:
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = field(default_factory=dict)
    type = PacketType.PUBLISH


@dataclass(slots=True)
class PubAck:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)
    type = PacketType.PUBACK


@dataclass(slots=True)
class PubRec:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)
    type = PacketType.PUBREC


@dataclass(slots=True)
class PubRel:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)
    type = PacketType.PUBREL


@dataclass(slots=True)
class PubComp:
    packet_id: int
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)
    type = PacketType.PUBCOMP


@dataclass(slots=True)
class Subscription:
    topic_filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(slots=True)
class Subscribe:
    packet_id: int
    subscriptions: list[Subscription]
    properties: Properties = field(default_factory=dict)
    type = PacketType.SUBSCRIBE


@dataclass(slots=True)
class SubAck:
    packet_id: int
    reason_codes: list[int]
    properties: Properties = field(default_factory=dict)
    type = PacketType.SUBACK


@dataclass(slots=True)
class Unsubscribe:
    packet_id: int
    topic_filters: list[str]
    properties: Properties = field(default_factory=dict)
    type = PacketType.UNSUBSCRIBE


@dataclass(slots=True)
class UnsubAck:
    packet_id: int
    reason_codes: list[int] = field(default_factory=list)  # empty on 3.1.1
    properties: Properties = field(default_factory=dict)
    type = PacketType.UNSUBACK


@dataclass(slots=True)
class PingReq:
    type = PacketType.PINGREQ


@dataclass(slots=True)
class PingResp:
    type = PacketType.PINGRESP


@dataclass(slots=True)
class Disconnect:
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)
    type = PacketType.DISCONNECT


@dataclass(slots=True)
class Auth:
    reason_code: int = 0
    properties: Properties = field(default_factory=dict)
    type = PacketType.AUTH


Packet = (
    Connect
    | Connack
    | Publish
    | PubAck
    | PubRec
    | PubRel
    | PubComp
    | Subscribe
    | SubAck
    | Unsubscribe
    | UnsubAck
    | PingReq
    | PingResp
    | Disconnect
    | Auth
)

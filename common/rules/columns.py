"""An archive row seen as EMQX's rule columns (`clientid`, `payload`, `flags.retain`, ...).

Columns are computed on first use and cached per row, so a rule that reads `payload.temp` never
builds `pub_props`, and a payload is decoded from JSON at most once per row (`Env.payload_json`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from common.archive.schema import (
    EVENT_CONNECTED,
    EVENT_DISCONNECTED,
    EVENT_PUBLISH,
    EVENT_SUBSCRIBED,
    EVENT_UNSUBSCRIBED,
)
from common.rules.budget import Budget, Meter
from common.rules.errors import RuleRuntimeError
from common.rules.values import from_bytes, loads

NODE = "mqtt-platform"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ts_millis(value: Any) -> int | None:
    """The archive's `ts` (a datetime, or already milliseconds) as integer milliseconds."""
    if value is None:
        return None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        delta: timedelta = value - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    return int(value)


def _payload(row: Mapping[str, Any]) -> Any:
    payload = row.get("payload")
    if payload is None:
        return None
    if isinstance(payload, (bytes, bytearray, memoryview)):
        return from_bytes(bytes(payload))
    return payload


def _pairs(row: Mapping[str, Any]) -> list[tuple[Any, Any]]:
    pairs: list[tuple[Any, Any]] = []  # as stored: a key or value may be missing (None)
    for item in row.get("user_properties") or ():
        if isinstance(item, Mapping):
            pairs.append((item.get("key"), item.get("value")))
        else:
            key, value = item
            pairs.append((key, value))
    return pairs


def _user_properties(row: Mapping[str, Any]) -> dict[str, str]:
    return dict(_pairs(row))


def _pub_props(row: Mapping[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = {}
    pairs = _pairs(row)
    if pairs:
        props["User-Property"] = dict(pairs)
        props["User-Property-Pairs"] = [{"key": k, "value": v} for k, v in pairs]
    for column, name in (
        ("payload_format", "Payload-Format-Indicator"),
        ("content_type", "Content-Type"),
        ("message_expiry", "Message-Expiry-Interval"),
        ("response_topic", "Response-Topic"),
    ):
        value = row.get(column)
        if value is not None:
            props[name] = value
    correlation = row.get("correlation_data")
    if correlation is not None:
        props["Correlation-Data"] = (
            from_bytes(bytes(correlation)) if not isinstance(correlation, str) else correlation
        )
    return props


def _message_id(row: Mapping[str, Any]) -> str:
    """EMQX gives each message a 128-bit id; the archive keeps none, so derive a stable one."""
    digest = hashlib.md5(usedforsecurity=False)
    digest.update(f"{ts_millis(row.get('ts'))}|{row.get('client_id')}|{row.get('topic')}|".encode())
    payload = row.get("payload")
    if isinstance(payload, (bytes, bytearray)):
        digest.update(payload)
    elif payload is not None:
        digest.update(str(payload).encode())
    return digest.hexdigest().upper()


def _peerhost(row: Mapping[str, Any]) -> str | None:
    peer = row.get("peer")
    if not peer:
        return None
    text = str(peer)
    host, sep, _port = text.rpartition(":")
    return (host if sep else text).strip("[]")


def _event(row: Mapping[str, Any]) -> str:
    return row.get("event") or EVENT_PUBLISH


def _at(event: str) -> Callable[[Mapping[str, Any]], int | None]:
    return lambda row: ts_millis(row.get("ts")) if _event(row) == event else None


GETTERS: dict[str, Callable[[Mapping[str, Any]], Any]] = {
    "event": _event,
    "id": _message_id,
    "clientid": lambda row: row.get("client_id"),
    "username": lambda row: row.get("username"),
    "topic": lambda row: row.get("topic"),
    "qos": lambda row: row.get("qos"),
    "payload": _payload,
    "flags": lambda row: {"retain": bool(row.get("retain")), "dup": False},
    "retain": lambda row: bool(row.get("retain")),
    "timestamp": lambda row: ts_millis(row.get("ts")),
    "publish_received_at": lambda row: ts_millis(row.get("ts")),
    "node": lambda row: NODE,
    "peerhost": _peerhost,
    "peername": lambda row: row.get("peer"),
    "pub_props": _pub_props,
    "user_properties": _user_properties,
    "payload_format": lambda row: row.get("payload_format"),
    "content_type": lambda row: row.get("content_type"),
    "message_expiry": lambda row: row.get("message_expiry"),
    "response_topic": lambda row: row.get("response_topic"),
    "reason": lambda row: row.get("reason"),
    "proto_name": lambda row: "MQTT",
    "proto_ver": lambda row: row.get("proto_ver"),
    "keepalive": lambda row: row.get("keepalive"),
    "clean_start": lambda row: row.get("clean_start"),
    "expiry_interval": lambda row: row.get("session_expiry"),
    "connected_at": _at(EVENT_CONNECTED),
    "disconnected_at": _at(EVENT_DISCONNECTED),
    # EMQX event columns the archive has no data for: present, empty, as EMQX shows them unset.
    "mountpoint": lambda row: None,
    "sockname": lambda row: None,
    "is_bridge": lambda row: False,
    "conn_props": lambda row: {},
    "disconn_props": lambda row: {},
    "sub_props": lambda row: {},
    "unsub_props": lambda row: {},
    "client_attrs": lambda row: {},
    # EMQX adds `metadata` to every row a rule reads: `{"rule_id": …}` (Env sets it per rule).
    "metadata": lambda row: {},
}

# What `SELECT *` (and FOREACH without DO) returns for each kind of row, as EMQX lists them.
STAR_COLUMNS: dict[str, tuple[str, ...]] = {
    EVENT_PUBLISH: (
        "event",
        "id",
        "clientid",
        "username",
        "payload",
        "peerhost",
        "topic",
        "qos",
        "flags",
        "pub_props",
        "timestamp",
        "publish_received_at",
        "node",
        "metadata",
    ),
    EVENT_CONNECTED: (
        "event",
        "clientid",
        "username",
        "peername",
        "peerhost",
        "proto_name",
        "proto_ver",
        "keepalive",
        "clean_start",
        "expiry_interval",
        "is_bridge",
        "mountpoint",
        "conn_props",
        "client_attrs",
        "connected_at",
        "timestamp",
        "node",
        "metadata",
    ),
    EVENT_DISCONNECTED: (
        "event",
        "clientid",
        "username",
        "reason",
        "peername",
        "peerhost",
        "proto_name",
        "proto_ver",
        "disconn_props",
        "client_attrs",
        "disconnected_at",
        "timestamp",
        "node",
        "metadata",
    ),
    EVENT_SUBSCRIBED: (
        "event",
        "clientid",
        "username",
        "peerhost",
        "topic",
        "qos",
        "sub_props",
        "client_attrs",
        "timestamp",
        "node",
        "metadata",
    ),
    EVENT_UNSUBSCRIBED: (
        "event",
        "clientid",
        "username",
        "peerhost",
        "topic",
        "qos",
        "unsub_props",
        "client_attrs",
        "timestamp",
        "node",
        "metadata",
    ),
}

_MISSING = object()


class Env:
    """One row being evaluated: its columns (lazy, cached), what SELECT has built so far, and
    the payload decoded at most once."""

    __slots__ = ("row", "cols", "selected", "_json", "meter")

    def __init__(
        self, row: Mapping[str, Any], meter: Meter | None = None, rule_id: str | None = None
    ):
        self.row = row
        self.cols: dict[str, Any] = {} if rule_id is None else {"metadata": {"rule_id": rule_id}}
        self.selected: dict[str, Any] = {}
        self._json: Any = _MISSING
        self.meter = meter if meter is not None else Meter(Budget())  # what it may spend

    def column(self, name: str) -> Any:
        cols = self.cols
        if name in cols:
            return cols[name]
        getter = GETTERS.get(name)
        value = getter(self.row) if getter is not None else None
        cols[name] = value
        return value

    def payload_json(self) -> Any:
        """The payload decoded from JSON, once per row; not JSON -> RuleRuntimeError."""
        decoded = self._json
        if decoded is _MISSING:
            raw = self.row.get("payload") if "payload" not in self.cols else None
            if type(raw) is bytes:
                try:  # straight from the bytes: no text copy first
                    decoded = loads(raw)
                except ValueError:
                    decoded = decode_json(self.column("payload"), "payload")
            else:
                decoded = decode_json(self.column("payload"), "payload")
            self._json = decoded
        return decoded

    def all_columns(self) -> dict[str, Any]:
        event = self.column("event")
        out = {name: self.column(name) for name in STAR_COLUMNS.get(event, ())}
        for name, value in self.cols.items():
            if name not in out and name not in GETTERS:
                out[name] = value  # FOREACH aliases and dry-run extras
        return out


def decode_json(value: Any, what: str) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return loads(value)
    except ValueError:
        shown = value if len(value) <= 40 else value[:37] + "..."
        raise RuleRuntimeError(f"{what} is not valid JSON: {shown!r}") from None

"""What a connection refuses, told to whoever listens on the `client.refused` hook (operators'
log lines and per-tenant counters: `data_plane.observability.refusals`).

The decisions are made elsewhere (handshake, admission, the read path); this module only names
each refusal's kind and who was refused, so the places that apply decisions call one function.
Kinds: `auth_failed`, `acl_denied`, `quota_exceeded`, `malformed_packet`, `forced_disconnect`.
A hook gets `(connection, kind, reason_code, reason, who)`; `who` overrides the connection's
tenant / device / client id / address where the connection does not know them (CONNECT refusals,
a WebSocket refused before its upgrade) or no longer has one (a will that goes out later).
"""

from __future__ import annotations

from typing import Any

from common.mqtt.reason_codes import ReasonCode as RC

HOOK = "client.refused"
# Server-initiated closes that are no refusal of the client: not counted.
NOT_REFUSALS = frozenset({RC.SERVER_SHUTTING_DOWN})


def _tell(conn: Any, kind: str, reason_code: int, reason: str, **who: str) -> None:
    hooks = conn.broker.hooks
    if hooks.has(HOOK):
        hooks.run(HOOK, conn, kind, int(reason_code), reason, who)


def connect(conn: Any, refusal: Any, packet: Any) -> None:
    """A CONNECT answered with a refusing CONNACK (`refusal`: the handshake's `Refusal`)."""
    if refusal.quota:
        kind, reason = "quota_exceeded", refusal.quota
    elif "denied" in refusal.counts:
        kind, reason = "acl_denied", refusal.reason or "not authorized"
    else:
        kind, reason = "auth_failed", refusal.reason or "authentication failed"
    username = (getattr(packet, "username", None) or "")[:256]
    _tell(
        conn,
        kind,
        refusal.reason_code,
        reason,
        tenant=refusal.tenant or "",
        device=username.partition("/")[2],
        client_id=(getattr(packet, "client_id", "") or "")[:256],
    )


def publish(conn: Any, decision: Any, topic: str) -> None:
    """A PUBLISH refused, paused or ending the connection (admission's decision)."""
    code = getattr(decision, "reason_code", 0) or RC.QUOTA_EXCEEDED
    if decision.quota:
        if decision.quota == "message_size":
            code = RC.PACKET_TOO_LARGE
        _tell(conn, "quota_exceeded", code, decision.quota)
    elif "denied" in decision.counts:
        _tell(conn, "acl_denied", code, f"publish {topic[:256]!r} not authorized")
    else:
        _tell(conn, "malformed_packet", code, getattr(decision, "reason", ""))


def subscribe(conn: Any, filters: list[str], codes: list[int]) -> None:
    """The filters of a SUBSCRIBE refused by the ACL or the subscription quota."""
    for topic_filter, code in zip(filters, codes, strict=True):
        if code == RC.NOT_AUTHORIZED:
            _tell(conn, "acl_denied", code, f"subscribe {topic_filter[:256]!r} not authorized")
        elif code == RC.QUOTA_EXCEEDED:
            _tell(conn, "quota_exceeded", code, "subscriptions")


def malformed(conn: Any, reason_code: int, reason: str) -> None:
    """Bytes that are not valid MQTT, or a protocol violation: the connection ends."""
    _tell(conn, "malformed_packet", reason_code, reason)


def websocket(conn: Any, reason: str, address: str = "") -> None:
    """A WebSocket the broker closes for bad framing or a bad upgrade (a client's frame not
    masked, reserved bits, a control frame too long, invalid UTF-8 in a close, bad HTTP…): for
    operators this is a malformed packet, the MQTT bytes never having been readable."""
    who = {"address": address} if address and not conn.peer else {}
    _tell(conn, "malformed_packet", RC.MALFORMED_PACKET, f"WebSocket: {reason}"[:300], **who)


class _Gone:
    """Who a will belonged to once its connection is gone (the hook's `connection`)."""

    def __init__(self, broker: Any, session: Any, will: Any) -> None:
        conn = getattr(session, "connection", None)
        self.broker = broker
        self.tenant = will.tenant
        self.device = will.device or getattr(session, "device", "")
        self.client_id = getattr(session, "client_id", "") or will.publisher
        self.peer = getattr(conn, "peer", "") if conn is not None else ""


def will(
    broker: Any, session: Any, will_message: Any, kind: str, reason_code: int, reason: str
) -> None:
    """A will refused when it goes out (the ACL or the retained quota as they stand then; the
    connection may be long gone)."""
    _tell(_Gone(broker, session, will_message), kind, reason_code, reason)


def disconnected(conn: Any, reason_code: int, reason: str) -> None:
    """The server ends a live connection (keep-alive, kicked, taken over…)."""
    if reason_code not in NOT_REFUSALS:
        _tell(conn, "forced_disconnect", reason_code, reason or f"0x{reason_code:02x}")

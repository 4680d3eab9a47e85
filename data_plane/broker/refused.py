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

from typing import Protocol

from common.mqtt.packets import Connect
from common.mqtt.reason_codes import ReasonCode as RC

HOOK = "client.refused"
# Server-initiated closes that are no refusal of the client: not counted.
NOT_REFUSALS = frozenset({RC.SERVER_SHUTTING_DOWN})


class HookRunner(Protocol):
    """The broker's hooks (`hooks.Hooks`)."""

    def has(self, name: str) -> bool: ...

    def run(self, name: str, *args: object) -> None: ...


class Told(Protocol):
    """Where the hooks are (`broker.Broker`)."""

    @property
    def hooks(self) -> HookRunner: ...


class Refused(Protocol):
    """Who was refused, as the hook's `connection` (a `connection.MQTTConnection`, or `_Gone`):
    the hook reads its tenant, device, client id and peer."""

    @property
    def broker(self) -> Told: ...
    @property
    def peer(self) -> str: ...


class ConnectRefusal(Protocol):
    """The handshake's `Refusal`."""

    @property
    def reason_code(self) -> int: ...
    @property
    def reason(self) -> str: ...
    @property
    def tenant(self) -> str: ...
    @property
    def quota(self) -> str | None: ...
    @property
    def counts(self) -> tuple[str, ...]: ...


class PublishRefusal(Protocol):
    """Admission's `Refuse` or `Disconnect` (a `Pause` is no refusal: the hook never hears it)."""

    @property
    def reason_code(self) -> int: ...
    @property
    def reason(self) -> str: ...
    @property
    def quota(self) -> str | None: ...
    @property
    def counts(self) -> tuple[str, ...]: ...


class Will(Protocol):
    """A will (`message.Message`): whose it was."""

    @property
    def tenant(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def publisher(self) -> str: ...


class WillOwner(Protocol):
    """The session a will belonged to (`session.Session`)."""

    @property
    def client_id(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def connection(self) -> object: ...


def _tell(conn: Refused, kind: str, reason_code: int, reason: str, **who: str) -> None:
    hooks = conn.broker.hooks
    if hooks.has(HOOK):
        hooks.run(HOOK, conn, kind, int(reason_code), reason, who)


def connect(conn: Refused, refusal: ConnectRefusal, packet: Connect) -> None:
    """A CONNECT answered with a refusing CONNACK (`refusal`: the handshake's `Refusal`)."""
    if refusal.quota:
        kind, reason = "quota_exceeded", refusal.quota
    elif "denied" in refusal.counts:
        kind, reason = "acl_denied", refusal.reason or "not authorized"
    else:
        kind, reason = "auth_failed", refusal.reason or "authentication failed"
    username = (packet.username or "")[:256]
    _tell(
        conn,
        kind,
        refusal.reason_code,
        reason,
        tenant=refusal.tenant or "",
        device=username.partition("/")[2],
        client_id=(packet.client_id or "")[:256],
    )


def publish(conn: Refused, decision: PublishRefusal, topic: str) -> None:
    """A PUBLISH refused or ending the connection (admission's decision)."""
    code = decision.reason_code or RC.QUOTA_EXCEEDED
    if decision.quota:
        if decision.quota == "message_size":
            code = RC.PACKET_TOO_LARGE
        _tell(conn, "quota_exceeded", code, decision.quota)
    elif "denied" in decision.counts:
        _tell(conn, "acl_denied", code, f"publish {topic[:256]!r} not authorized")
    else:
        _tell(conn, "malformed_packet", code, decision.reason)


def subscribe(conn: Refused, filters: list[str], codes: list[int]) -> None:
    """The filters of a SUBSCRIBE refused by the ACL or the subscription quota."""
    for topic_filter, code in zip(filters, codes, strict=True):
        if code == RC.NOT_AUTHORIZED:
            _tell(conn, "acl_denied", code, f"subscribe {topic_filter[:256]!r} not authorized")
        elif code == RC.QUOTA_EXCEEDED:
            _tell(conn, "quota_exceeded", code, "subscriptions")


def malformed(conn: Refused, reason_code: int, reason: str) -> None:
    """Bytes that are not valid MQTT, or a protocol violation: the connection ends."""
    _tell(conn, "malformed_packet", reason_code, reason)


def websocket(conn: Refused, reason: str, address: str = "") -> None:
    """A WebSocket the broker closes for bad framing or a bad upgrade (a client's frame not
    masked, reserved bits, a control frame too long, invalid UTF-8 in a close, bad HTTP…): for
    operators this is a malformed packet, the MQTT bytes never having been readable."""
    who = {"address": address} if address and not conn.peer else {}
    _tell(conn, "malformed_packet", RC.MALFORMED_PACKET, f"WebSocket: {reason}"[:300], **who)


class _Gone:
    """Who a will belonged to once its connection is gone (the hook's `connection`)."""

    def __init__(self, broker: Told, session: WillOwner | None, will: Will) -> None:
        self.broker = broker
        self.tenant = will.tenant
        self.device = will.device or (session.device if session is not None else "")
        self.client_id = (session.client_id if session is not None else "") or will.publisher
        conn = session.connection if session is not None else None
        # A session's connection is any `ports.Outlet`; only a live MQTT connection has a peer.
        self.peer: str = getattr(conn, "peer", "")


def will(
    broker: Told,
    session: WillOwner | None,
    will_message: Will,
    kind: str,
    reason_code: int,
    reason: str,
) -> None:
    """A will refused when it goes out (the ACL or the retained quota as they stand then; the
    connection may be long gone)."""
    _tell(_Gone(broker, session, will_message), kind, reason_code, reason)


def disconnected(conn: Refused, reason_code: int, reason: str) -> None:
    """The server ends a live connection (keep-alive, kicked, taken over…)."""
    if reason_code not in NOT_REFUSALS:
        _tell(conn, "forced_disconnect", reason_code, reason or f"0x{reason_code:02x}")

"""What a connection's collaborators decide it should do, as values (EMQX's channel model: a
handler returns its replies and actions; the connection applies them). A collaborator returns
an `Action`, a tuple of them, or None; the connection's `apply` does each in order, and nothing
else writes through the connection.

The hot path (a PUBLISH routed and acknowledged) returns None and builds no action: only what
ends or changes the connection, and the rarer replies, are values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from common.mqtt.codec import encode
from common.mqtt.packets import MQTT_5_0, Properties
from common.mqtt.packets import Disconnect as DisconnectPacket
from data_plane.broker.auth import AuthResult


class Target(Protocol):
    """What the actions do to a connection (`connection.MQTTConnection`)."""

    disconnect_reason: str
    auth: AuthResult | None

    def send(self, data: bytes) -> None: ...

    def write_now(self, data: bytes) -> None: ...

    def close(self) -> None: ...

    def disconnect(
        self, reason_code: int, reason: str = "", *, reference: str = "", refusal: bool = True
    ) -> None: ...

    def will_on_close(self, send: bool) -> None: ...


@dataclass(frozen=True, slots=True)
class Send:
    """Bytes for this loop turn's write (`writer.Writer.send`)."""

    data: bytes

    def apply(self, conn: Target) -> None:
        conn.send(self.data)


@dataclass(frozen=True, slots=True)
class SendNow:
    """What was batched, then these bytes, at once (before the connection waits or closes)."""

    data: bytes

    def apply(self, conn: Target) -> None:
        conn.write_now(self.data)


@dataclass(frozen=True, slots=True)
class Close:
    """End the connection; `reason`, if any, says why (`$events/client_disconnected`)."""

    reason: str = ""

    def apply(self, conn: Target) -> None:
        if self.reason:
            conn.disconnect_reason = self.reason
        conn.close()


@dataclass(frozen=True, slots=True)
class Disconnect:
    """Server-initiated close: DISCONNECT with this reason on 5.0 (`reference`: where to go
    instead); told as a forced disconnect unless `refusal` is False (already told)."""

    reason_code: int
    reason: str = ""
    reference: str = ""
    refusal: bool = True

    def apply(self, conn: Target) -> None:
        conn.disconnect(
            self.reason_code, self.reason, reference=self.reference, refusal=self.refusal
        )


@dataclass(frozen=True, slots=True)
class KeepWill:
    """Whether the will goes out when the connection closes (DISCONNECT 0x04 asks for it)."""

    send: bool

    def apply(self, conn: Target) -> None:
        conn.will_on_close(self.send)


@dataclass(frozen=True, slots=True)
class Renewed:
    """Re-authentication proved a new secret: the connection now holds it (its expiry)."""

    credential_id: int | None
    expires_at: datetime | None

    def apply(self, conn: Target) -> None:
        if conn.auth is not None:
            conn.auth.credential_id = self.credential_id
            conn.auth.credential_expires_at = self.expires_at


Action = Send | SendNow | Close | Disconnect | KeepWill | Renewed
Actions = Action | tuple[Action, ...] | None


def apply(conn: Target, actions: Actions) -> None:
    """Do `actions` to `conn`, in order."""
    if actions is None:
        return
    if type(actions) is tuple:
        for action in actions:
            action.apply(conn)
    else:
        actions.apply(conn)  # type: ignore[union-attr]  # not a tuple: one action (`type() is` does not narrow)


def disconnect_packet(
    reason_code: int, reference: str = ""
) -> Callable[[Properties | None], bytes]:
    """The 5.0 DISCONNECT with this reason (and Server Reference), given its other properties
    (a Reason String where the client may take one: the connection's `with_reason`)."""
    extra = {"server_reference": reference} if reference else {}

    def build(props: Properties | None) -> bytes:
        return encode(DisconnectPacket(reason_code, {**(props or {}), **extra}), MQTT_5_0)

    return build

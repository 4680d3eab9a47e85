"""Who may connect: the `Authenticator` interface the broker calls and the `AuthResult` it gets.

The implementations live in `data_plane.tenancy`: from the control plane's tables
(`authenticator.py`) or from a JSON file (`static.py`).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from typing import Any, Protocol

from common.mqtt.packets import Connect


class Authorizer(Protocol):
    def can_publish(self, topic: str) -> bool: ...

    def can_subscribe(self, topic_filter: str) -> bool: ...


@dataclass(slots=True)
class AuthResult:
    reason_code: int  # 0 accepts; otherwise the 5.0 CONNACK reason code
    tenant: str = ""
    device: str = ""
    client_id: str = ""  # the id to use: the client's, or one the policy assigns
    acl: Authorizer | None = None  # None: everything within the tenant is allowed
    quota: dict[str, int] = field(default_factory=dict)
    reason: str = ""
    tenant_id: int | None = None  # the tenant's database id, for durable sessions
    queue_qos0_offline: bool = False  # keep QoS 0 for the session while its client is away
    # An internal identity (the portal's live view): not one of the tenant's clients, so not
    # counted, metered or announced; its authorizer stays as issued.
    service: bool = False
    # Which of the device's secrets authenticated this connection, and when it stops being
    # accepted (a rotation's grace period): the tenancy layer drops the connection then.
    credential_id: int | None = None
    credential_expires_at: Any = None  # datetime | None
    # How the client proved who it is, when not by secret (`ca:ID`, `cert:ID`, `jwt:ID`):
    # revoking that ends exactly these connections (`data_plane.tenancy.identity`).
    identity: str = ""


class Authenticator(Protocol):
    async def authenticate(self, connect: Connect, peer: str) -> AuthResult: ...


def peer_certificate(transport: Any) -> bytes | None:
    """The client certificate (DER) the TLS handshake received, if any (mTLS device identity:
    an authenticator with `accepts_certificates` is given it)."""
    get = getattr(transport, "get_extra_info", None)
    getpeercert = getattr(get("ssl_object") if get is not None else None, "getpeercert", None)
    if getpeercert is None:  # not TLS
        return None
    try:
        return getpeercert(binary_form=True)
    except (ValueError, ssl.SSLError):  # handshake not complete
        return None

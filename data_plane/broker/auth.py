"""Who may connect: the `Authenticator` interface the broker calls and the `AuthResult` it gets.

The implementations live in `data_plane.tenancy`: from the control plane's tables
(`authenticator.py`) or from a JSON file (`static.py`).
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
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
    # The tenant's spend control is in force (its budget reached, at_limit degrade): a new
    # connection is refused with 0x97; live ones are kept.
    budget_degraded: bool = False
    # An internal identity (the portal's live view): not one of the tenant's clients, so not
    # counted, metered or announced; its authorizer stays as issued.
    service: bool = False
    # Which of the device's secrets authenticated this connection, and when it stops being
    # accepted (a rotation's grace period): the tenancy layer drops the connection then.
    credential_id: int | None = None
    credential_expires_at: datetime | None = None
    # How the client proved who it is, when not by secret (`ca:ID`, `cert:ID`, `jwt:ID`):
    # revoking that ends exactly these connections (`data_plane.tenancy.identity`).
    identity: str = ""
    # When that identity stops being valid (a client certificate's notAfter, a JWT's exp): the
    # tenancy layer ends the connection then (`data_plane.tenancy.identity_expiry`).
    valid_until: datetime | None = None


class Authenticator(Protocol):
    """Who a CONNECT's client is. `certificate`: a TLS client's chain (`peer_certificate`), given
    only to an authenticator whose `accepts_certificates` is true (the others may omit it)."""

    async def authenticate(
        self, connect: Connect, peer: str, certificate: Sequence[bytes] | bytes | None = None
    ) -> AuthResult: ...


class ClientChain(tuple[bytes, ...]):
    """A TLS client's certificate chain (DER, the device's own first, then what it sent with
    it), and the tenant its server name (SNI) chose, if it named one (`endpoint_tenant`)."""

    endpoint_tenant: str | None = None


def endpoint_tenant(transport: Any) -> str | None:
    """The tenant the client's TLS server name (SNI) named, `{tenant}.{MQTT_TLS_DOMAIN}`, with a
    client certificate or without (the listener's TLS objects say it); None for a plain socket,
    another name, or none."""
    get = getattr(transport, "get_extra_info", None)
    ssl_object = get("ssl_object") if get is not None else None
    return getattr(ssl_object, "endpoint_tenant", None)


def elsewhere(transport: Any, result: AuthResult) -> str | None:
    """Why `result` may not come in through the endpoint its client named, if it may not: a
    client that named a tenant's endpoint (SNI) is that tenant's device or nobody's, whatever
    credentials it brings, as an AWS IoT endpoint names its account (certificate clients are
    held to it by the authenticator already; this is for passwords, tokens, enhanced auth)."""
    endpoint = endpoint_tenant(transport)
    if endpoint is None or result.tenant == endpoint or result.service:
        return None
    return f"the user name's tenant is not the endpoint's ({endpoint})"


def peer_certificate(transport: Any) -> ClientChain | None:
    """The client certificate chain the TLS handshake received, if any (mTLS device identity:
    an authenticator with `accepts_certificates` is given it and judges it; intermediates let it
    find the tenant's registered CA). As the client sent it: the TLS listener leaves the verdict
    to the authenticator (`data_plane.tenancy.tls_client_chains`). Public interfaces only:
    `get_unverified_chain` (`ssl.SSLObject` from Python 3.13, and the listener's TLS objects);
    elsewhere the device's certificate alone."""
    get = getattr(transport, "get_extra_info", None)
    ssl_object = get("ssl_object") if get is not None else None
    getpeercert = getattr(ssl_object, "getpeercert", None)
    if getpeercert is None:  # not TLS
        return None
    try:
        leaf = getpeercert(binary_form=True)
        sent = getattr(ssl_object, "get_unverified_chain", None)
        ders = [bytes(der) for der in (sent() if sent is not None else None) or ()]
    except (ValueError, ssl.SSLError):  # handshake not complete
        return None
    if not leaf:
        return None
    chain = ClientChain(ders if ders and ders[0] == leaf else (leaf,))
    chain.endpoint_tenant = endpoint_tenant(transport)
    return chain

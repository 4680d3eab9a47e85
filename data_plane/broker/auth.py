"""Who may connect: the `Authenticator` interface and a static implementation from a JSON file.

The Postgres-backed implementation that reads the control plane's tables lives in
`data_plane.tenancy.authenticator`.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from common.client_id_pattern import matches as client_id_matches
from data_plane.mqtt.packets import Connect


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
    # How the client proved who it is, when not by secret (`ca:ID`, `cert:ID`, `jwt:ID`):
    # revoking that ends exactly these connections (`data_plane.tenancy.identity`).
    identity: str = ""


class Authenticator(Protocol):
    async def authenticate(self, connect: Connect, peer: str) -> AuthResult: ...


class StaticAuthenticator:
    """Tenants and devices from JSON:
    {"tenants": {"acme": {"devices": {"sensor-1": {"password": "...", "client_ids": "any"}},
                          "acl": [{"action": "subscribe", "permission": "deny",
                                   "topic": "test/nosubscribe"}], "acl_default": "allow"}}}
    client_ids: "exact" (default: client id = device name), "any", or a glob pattern (`*`, `?`:
    `common.client_id_pattern`). "acl": ordered rules as the control plane's (optional)."""

    def __init__(self, tenants: dict[str, Any]) -> None:
        self.tenants = tenants
        self._verifiers: dict[tuple[str, str], tuple[str, tuple]] = {}

    @classmethod
    def from_file(cls, path: str | Path) -> StaticAuthenticator:
        return cls(json.loads(Path(path).read_text())["tenants"])

    async def authenticate(self, connect: Connect, peer: str) -> AuthResult:
        result, entry = self._identify(connect)
        if entry is None or connect.password is None:
            return AuthResult(0x86, reason="bad user name or password")
        if not hmac.compare_digest(connect.password, str(entry["password"]).encode()):
            return AuthResult(0x86, reason="bad user name or password")
        return result

    async def scram_lookup(self, connect: Connect, peer: str) -> tuple[AuthResult, tuple | None]:
        """For SCRAM-SHA-256 (enhanced authentication): the identity and its verifier."""
        from data_plane.broker.enhanced_auth import ScramSha256

        result, entry = self._identify(connect)
        if entry is None:
            return AuthResult(0x86, reason="bad user name or password"), None
        if result.reason_code:
            return result, None
        key, secret = (result.tenant, result.device), str(entry["password"])
        cached = self._verifiers.get(key)
        if cached is None or cached[0] != secret:  # derived once: PBKDF2 is slow on purpose
            cached = self._verifiers[key] = (secret, ScramSha256.verifier(secret))
        return result, cached[1]

    def _identify(self, connect: Connect) -> tuple[AuthResult, dict | None]:
        """Who the user name names and whether it may connect now, the secret aside."""
        tenant, _, device = (connect.username or "").partition("/")
        entry = self.tenants.get(tenant, {}).get("devices", {}).get(device)
        if not tenant or not device or entry is None:
            return AuthResult(0x86, reason="bad user name or password"), None
        if entry.get("disabled"):
            return AuthResult(0x87, reason="device disabled"), entry
        policy = entry.get("client_ids", "exact")
        client_id = connect.client_id
        if policy == "exact":
            if client_id not in ("", device):
                return AuthResult(0x85, reason="client id must be the device name"), entry
            client_id = device
        elif policy != "any" and not client_id_matches(policy, client_id):
            return AuthResult(0x85, reason="client id not allowed"), entry
        config = self.tenants[tenant]
        quota = dict(config.get("quota", {}))
        return AuthResult(
            0, tenant, device, client_id, self._acl(config, tenant, device), quota
        ), entry

    @staticmethod
    def _acl(config: dict[str, Any], tenant: str, device: str) -> Authorizer | None:
        rules = config.get("acl")
        if not rules:
            return None  # everything within the tenant
        from data_plane.tenancy.acl import AclEntry, AclPolicy

        entries = [
            AclEntry(r["action"], r["permission"] == "allow", r["topic"], r.get("device"))
            for r in rules
        ]
        default_allow = config.get("acl_default", "allow") != "deny"
        return AclPolicy(entries, tenant=tenant, device=device, default_allow=default_allow)

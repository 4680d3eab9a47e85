"""The broker's `Authenticator` from a JSON file: tenants, devices, their ACLs and quotas, for a
broker run without the control plane (tests, benchmarks, `python -m data_plane --auth-file`).
It lives beside the Postgres one (`authenticator.py`) and answers the same `AuthResult`."""

from __future__ import annotations

import hmac
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common.access.acl import AclEntry, AclPolicy
from common.access.client_id_pattern import matches as client_id_matches
from common.mqtt.packets import Connect
from common.mqtt.reason_codes import ReasonCode
from data_plane.broker.auth import Authorizer, AuthResult
from data_plane.broker.enhanced_auth import ScramSha256
from data_plane.tenancy.aws_user_name import as_sent_by_aws_sdk


class StaticAuthenticator:
    """Tenants and devices from JSON:
    {"tenants": {"acme": {"devices": {"sensor-1": {"password": "...", "client_ids": "any"}},
                          "acl": [{"action": "subscribe", "permission": "deny",
                                   "topic": "test/nosubscribe"}], "acl_default": "allow"}}}
    client_ids: "exact" (default: client id = device name), "any", or a glob pattern (`*`, `?`:
    `common.access.client_id_pattern`). "acl": ordered rules as the control plane's (optional)."""

    def __init__(self, tenants: dict[str, Any]) -> None:
        self.tenants = tenants
        self._verifiers: dict[tuple[str, str], tuple[str, tuple]] = {}

    def has_device(self, tenant: str, device: str) -> bool:
        """Whether `device` is one of `tenant`'s (a thing, for the device shadows)."""
        return device in self.tenants.get(tenant, {}).get("devices", {})

    @classmethod
    def from_file(cls, path: str | Path) -> StaticAuthenticator:
        return cls(json.loads(Path(path).read_text())["tenants"])

    async def authenticate(
        self,
        connect: Connect,
        peer: str,
        certificate: Sequence[bytes] | bytes | None = None,  # never given: see `Authenticator`
    ) -> AuthResult:
        result, entry = self._identify(connect)
        if entry is None or connect.password is None:
            return AuthResult(
                ReasonCode.BAD_USER_NAME_OR_PASSWORD, reason="bad user name or password"
            )
        if not hmac.compare_digest(connect.password, str(entry["password"]).encode()):
            return AuthResult(
                ReasonCode.BAD_USER_NAME_OR_PASSWORD, reason="bad user name or password"
            )
        return result

    async def scram_lookup(self, connect: Connect, peer: str) -> tuple[AuthResult, tuple | None]:
        """For SCRAM-SHA-256 (enhanced authentication): the identity and its verifier."""
        result, entry = self._identify(connect)
        if entry is None:
            return AuthResult(
                ReasonCode.BAD_USER_NAME_OR_PASSWORD, reason="bad user name or password"
            ), None
        if result.reason_code:
            return result, None
        key, secret = (result.tenant, result.device), str(entry["password"])
        cached = self._verifiers.get(key)
        if cached is None or cached[0] != secret:  # derived once: PBKDF2 is slow on purpose
            cached = self._verifiers[key] = (secret, ScramSha256.verifier(secret))
        return result, cached[1]

    def _identify(self, connect: Connect) -> tuple[AuthResult, dict | None]:
        """Who the user name names and whether it may connect now, the secret aside."""
        connect = as_sent_by_aws_sdk(connect)  # `?SDK=…` metrics are no part of the name
        tenant, _, device = (connect.username or "").partition("/")
        entry = self.tenants.get(tenant, {}).get("devices", {}).get(device)
        if not tenant or not device or entry is None:
            return AuthResult(
                ReasonCode.BAD_USER_NAME_OR_PASSWORD, reason="bad user name or password"
            ), None
        if entry.get("disabled"):
            return AuthResult(ReasonCode.NOT_AUTHORIZED, reason="device disabled"), entry
        policy = entry.get("client_ids", "exact")
        client_id = connect.client_id
        if policy == "exact":
            if client_id not in ("", device):
                return AuthResult(
                    ReasonCode.CLIENT_IDENTIFIER_NOT_VALID,
                    reason="client id must be the device name",
                ), entry
            client_id = device
        elif policy != "any" and not client_id_matches(policy, client_id):
            return AuthResult(
                ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, reason="client id not allowed"
            ), entry
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
        entries = [
            AclEntry(r["action"], r["permission"] == "allow", r["topic"], r.get("device"))
            for r in rules
        ]
        default_allow = config.get("acl_default", "allow") != "deny"
        return AclPolicy(entries, tenant=tenant, device=device, default_allow=default_allow)

"""The broker's `Authenticator` backed by the control plane's tables (via `TenantDirectory`)."""

from __future__ import annotations

from common.acl import AclPolicy
from common.mqtt.packets import Connect
from data_plane.broker.auth import AuthResult
from data_plane.tenancy import service_identity
from data_plane.tenancy.directory import TenantDirectory


class PostgresAuthenticator:
    def __init__(self, directory: TenantDirectory) -> None:
        self.directory = directory

    async def authenticate(self, connect: Connect, peer: str) -> AuthResult:
        address = peer.rsplit(":", 1)[0]
        decision = await self.directory.authenticate(
            connect.username, connect.password, connect.client_id, address
        )
        return self._result(decision)

    async def scram_lookup(self, connect: Connect, peer: str) -> tuple[AuthResult, tuple | None]:
        """For SCRAM-SHA-256 (enhanced authentication): the identity and its stored verifier."""
        decision, verifier = await self.directory.scram_identity(
            connect.username, connect.client_id, peer.rsplit(":", 1)[0]
        )
        return self._result(decision), verifier

    @staticmethod
    def _result(decision) -> AuthResult:
        if not decision.ok:
            return AuthResult(decision.reason_code, decision.tenant, reason=decision.reason)
        policy = decision.policy
        if decision.device in service_identity.SERVICE_DEVICES:
            return AuthResult(
                0,
                decision.tenant,
                decision.device,
                decision.client_id,
                service_identity.authorizer(decision.device),
                service=True,
            )
        acl = AclPolicy(
            policy.acl,
            tenant=decision.tenant,
            device=decision.device,
            default_allow=policy.acl_default_allow,
        )
        return AuthResult(
            0,
            decision.tenant,
            decision.device,
            decision.client_id,
            acl,
            dict(policy.quota),
            tenant_id=policy.tenant_id,
            queue_qos0_offline=policy.queue_qos0_offline,
            credential_id=decision.credential_id,
            credential_expires_at=decision.credential_expires_at,
        )

"""The broker's `Authenticator` backed by the control plane's tables (via `TenantDirectory`)."""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence
from datetime import UTC, datetime

from common.fleet.pki import FLEET_CN
from common.mqtt.packets import Connect
from common.mqtt.reason_codes import ReasonCode
from common.security.device_credentials import (
    LEEWAY,
    IdentityError,
    fingerprint,
    looks_like_jwt,
    verify_jwt,
)
from common.security.service_token import CLAIM_CLIENT_PREFIX
from data_plane.broker.auth import AuthResult
from data_plane.tenancy import service_identity
from data_plane.tenancy.aws_user_name import as_sent_by_aws_sdk
from data_plane.tenancy.directory import Decision, FailureThrottle, TenantDirectory
from data_plane.tenancy.fleet_identity import ClaimAuthorizer, auto_register, fleet_certificate
from data_plane.tenancy.identity import IdentityStore, TrustAnchors, identify_certificate

log = logging.getLogger(__name__)

CLAIM_DEVICE = "$claim"  # the device name of a claim certificate's connections
# Refused certificate attempts per (fingerprint, tenant claimed) in the window; then one a second.
CERTIFICATE_FAILURES = 10
CERTIFICATE_FAILURE_WINDOW = 10.0


def _leaf_fingerprint(chain: Sequence[bytes] | bytes) -> str:
    return fingerprint(chain if isinstance(chain, bytes) else chain[0])


def _fleet_refusal(issued, tenant: str) -> str:
    """Why a certificate of a fleet CA may not connect ("" if it may)."""
    if issued is None or issued.tenant != tenant:
        return "certificate not issued by the platform"
    if issued.revoked:
        return "certificate revoked"
    if issued.kind == "claim":
        return "" if issued.template_enabled else "provisioning template disabled"
    return "" if issued.device else "certificate not registered to a device (RegisterThing)"


class PostgresAuthenticator:
    """Secrets (and SCRAM) through the directory; client certificates and JWT passwords through
    `identities` when given (`data_plane.tenancy.identity`)."""

    accepts_certificates = True

    def __init__(
        self,
        directory: TenantDirectory,
        identities: IdentityStore | None = None,
        trust_anchors: TrustAnchors | None = None,
    ) -> None:
        self.directory = directory
        self.identities = identities
        self.trust_anchors = trust_anchors  # the TLS listener asks it for client-cert anchors
        # (certificate fingerprint, tenant claimed) -> failures (`_by_certificate`)
        self.by_certificate = FailureThrottle(CERTIFICATE_FAILURES, CERTIFICATE_FAILURE_WINDOW)

    async def authenticate(
        self, connect: Connect, peer: str, certificate: Sequence[bytes] | bytes | None = None
    ) -> AuthResult:
        address = peer.rsplit(":", 1)[0]
        connect = as_sent_by_aws_sdk(connect)  # `?SDK=…` metrics are no part of the name
        if self.identities is not None:
            # A client certificate is the identity; a password beside it is not looked at.
            if certificate is not None:
                return await self._by_certificate(connect, address, certificate)
            if looks_like_jwt(connect.password):
                return await self._by_jwt(connect, address)
        decision = await self.directory.authenticate(
            connect.username, connect.password, connect.client_id, address
        )
        return self._result(decision)

    async def _by_certificate(
        self, connect: Connect, address: str, chain: Sequence[bytes] | bytes
    ) -> AuthResult:
        endpoint = getattr(chain, "endpoint_tenant", None)
        # Failures are counted per certificate and the tenant it claims (its endpoint's or its
        # user name's), never per address: devices behind one NAT are not each other's hostages.
        key = (_leaf_fingerprint(chain), (endpoint or (connect.username or "")).split("/")[0])
        if self.by_certificate.blocked(key):
            return self._refused(ReasonCode.CONNECTION_RATE_EXCEEDED, "too many failed attempts")
        try:
            if self.trust_anchors is not None and self.trust_anchors.attached:
                ders = [chain] if isinstance(chain, bytes) else list(chain)
                if not self.trust_anchors.worth_a_lookup(ders):  # strangers': few lookups
                    raise IdentityError(
                        "client certificate not registered by any tenant (CA or fingerprint)"
                    )
            who = await identify_certificate(
                self.identities, chain, connect.username, endpoint_tenant=endpoint
            )
        except IdentityError as exc:
            self.by_certificate.fail(key)
            return self._refused(ReasonCode.BAD_USER_NAME_OR_PASSWORD, str(exc))
        except Exception as exc:  # the database: like the directory, refuse as unavailable
            log.warning("certificate lookup failed: %s", exc)
            return AuthResult(
                ReasonCode.SERVER_UNAVAILABLE, reason="authentication backend unavailable"
            )
        device = who.device
        if device == FLEET_CN:  # issued by the tenant's fleet CA: known by its SHA-256
            issued = await fleet_certificate(self.identities.pool, _leaf_fingerprint(chain))
            refusal = _fleet_refusal(issued, who.tenant)
            if refusal:
                self.by_certificate.fail(key)
                return self._refused(ReasonCode.NOT_AUTHORIZED, refusal, who.tenant)
            if issued.kind == "claim":
                return await self._as_claim(connect, issued, who)
            device = issued.device
        elif who.label.startswith("ca:"):
            ca_id = int(who.label.split()[0][3:])  # `ca:ID`, maybe followed by ` cert:ID`
            await self._register_just_in_time(who.tenant, device, ca_id)
        decision = await self.directory.admit(
            who.tenant, device, connect.client_id, address, connect.username
        )
        result = self._result(decision, identity=who.label)
        result.valid_until = who.not_after  # the connection ends when the certificate does
        return result

    def _refused(self, code: int, reason: str, tenant: str = "") -> AuthResult:
        self.directory.stats[f"rejected_{code:#04x}"] += 1
        return self._result(Decision(code, reason, tenant))

    async def _register_just_in_time(self, tenant: str, device: str, ca_id: int) -> None:
        """A device the tenant does not know yet, whose certificate its CA signed: made now if
        that CA has just-in-time registration on (the directory then reads it afresh)."""
        record = await self.directory.device(tenant, device)
        if record is None or record.device_id is not None:
            return  # no such tenant, or the device is known
        if await auto_register(self.identities.pool, ca_id, tenant, device):
            self.directory.forget_device(tenant, device)

    async def _as_claim(self, connect: Connect, claim, who) -> AuthResult:
        """A claim certificate: the fleet provisioning topics of its template, nothing else.
        Its client id is set apart (`$claim-…`): a claim, which a whole fleet shares, never
        takes over a device's session. It counts as one of the tenant's clients (its quota,
        connection limit and budget apply); its rights stay as issued (`ClaimAuthorizer.fixed`:
        a tenant policy change does not hand it the tenant's ACL)."""
        policy = await self.directory.policy(who.tenant)
        if policy is None or not policy.active:
            return AuthResult(ReasonCode.BANNED, who.tenant, reason="tenant suspended")
        client_id = connect.client_id or secrets.token_hex(8)
        return AuthResult(
            0,
            who.tenant,
            CLAIM_DEVICE,
            f"{CLAIM_CLIENT_PREFIX}{client_id}"[:128],
            ClaimAuthorizer(claim.certificate_id, claim.template_id, claim.template),
            dict(policy.quota),
            tenant_id=policy.tenant_id,
            budget_degraded=policy.budget_degraded,
            identity=who.label,
            valid_until=who.not_after,
        )

    async def _by_jwt(self, connect: Connect, address: str) -> AuthResult:
        tenant, _, device = (connect.username or "").partition("/")
        if not tenant or not device or "/" in device:
            return self._result(
                self.directory.refuse(
                    address,
                    connect.username,
                    ReasonCode.BAD_USER_NAME_OR_PASSWORD,
                    "username must be tenant/device",
                )
            )
        if self.directory.by_source.blocked((address, (connect.username or "")[:256])):
            return self._result(
                await self.directory.admit(tenant, device, "", address, connect.username)
            )
        try:
            keys = await self.identities.jwt_keys(tenant)
        except Exception as exc:
            log.warning("JWT key lookup failed: %s", exc)
            return AuthResult(
                ReasonCode.SERVER_UNAVAILABLE, tenant, reason="authentication backend unavailable"
            )
        try:
            claims, used = verify_jwt(
                (connect.password or b"").decode("ascii", "replace"),
                [key for _id, key in keys],
                tenant=tenant,
                device=device,
            )
        except IdentityError as exc:  # the tenant named only if it exists (it has keys)
            return self._result(
                self.directory.refuse(
                    address,
                    connect.username,
                    ReasonCode.BAD_USER_NAME_OR_PASSWORD,
                    str(exc),
                    tenant if keys else "",
                )
            )
        key_id = next(id_ for id_, key in keys if key is used)
        decision = await self.directory.admit(
            tenant, device, connect.client_id, address, connect.username
        )
        result = self._result(decision, identity=f"jwt:{key_id}")
        # The connection ends when the token does (with the clock skew it was accepted with).
        result.valid_until = datetime.fromtimestamp(float(claims["exp"]) + LEEWAY, UTC)
        return result

    async def scram_lookup(self, connect: Connect, peer: str) -> tuple[AuthResult, tuple | None]:
        """For SCRAM-SHA-256 (enhanced authentication): the identity and its stored verifier."""
        connect = as_sent_by_aws_sdk(connect)
        decision, verifier = await self.directory.scram_identity(
            connect.username, connect.client_id, peer.rsplit(":", 1)[0]
        )
        return self._result(decision), verifier

    @staticmethod
    def _result(decision, identity: str = "") -> AuthResult:
        if not decision.ok:
            return AuthResult(decision.reason_code, decision.tenant, reason=decision.reason)
        policy = decision.policy
        if decision.device in service_identity.PLATFORM_DEVICES:
            return AuthResult(
                0,
                decision.tenant,
                decision.device,
                decision.client_id,
                service_identity.authorizer(decision.device),
                service_identity.quota(decision.device, policy.quota),
                service=True,
            )
        # A device, or the browser client (`$console`/`$viewer`): the tenant's ACL and quota.
        acl = policy.authorizer(decision.tenant, decision.device)
        return AuthResult(
            0,
            decision.tenant,
            decision.device,
            decision.client_id,
            acl,
            dict(policy.quota),
            tenant_id=policy.tenant_id,
            queue_qos0_offline=policy.queue_qos0_offline,
            budget_degraded=policy.budget_degraded,
            credential_id=decision.credential_id,
            credential_expires_at=decision.credential_expires_at,
            identity=identity,
        )

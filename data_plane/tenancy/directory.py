"""Who may connect: `tenant/device` + secret checked against the control plane's tables, cached.

Cheap under connect storms: a device's record (its active credential hashes, flags, client-id
policy) is cached until a notification says it changed (and at most `ttl` seconds); a secret that
verified is remembered by its digest, so a wrong secret never matches the cache; unknown
tenants/devices are negative-cached briefly. Failed attempts are throttled per source (address
and user name) and per device, never per address alone: a neighbour's failures behind the same
address (a NAT, a gateway) never lock a device out, and a throttled key still has one attempt a
second judged, so the right secret gets in (`FailureThrottle`).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from common.access.client_id_pattern import matches as client_id_matches
from common.mqtt.reason_codes import ReasonCode
from common.security.secrets import parse_scram_verifier, verify_secret
from data_plane.tenancy import service_identity
from data_plane.tenancy.store import CredentialRecord, DeviceRecord, TenantPolicy, TenantStore

log = logging.getLogger(__name__)

# MQTT 5.0 CONNACK reason codes (the connection layer maps them to 3.1.1 return codes).


@dataclass(slots=True)
class Decision:
    reason_code: int
    reason: str
    tenant: str = ""
    device: str = ""
    client_id: str = ""  # the client id to use (assigned when the client sent none)
    policy: TenantPolicy | None = None
    # The credential the secret matched (a device may hold two during a rotation's grace
    # period): the connection is dropped when that one expires or is revoked.
    credential_id: int | None = None
    credential_expires_at: datetime | None = None

    @property
    def ok(self) -> bool:
        return self.reason_code == ReasonCode.SUCCESS


# What failures are counted by: (address, user name) or (tenant, device).
ThrottleKey = tuple[str, str]


class FailureThrottle:
    """At most `limit` failures per key in a sliding `window`; beyond, the key's attempts are
    refused unjudged but for one every `trickle` seconds, which is judged as usual: guessing
    slows to that pace while the right secret still gets in (clients retry)."""

    def __init__(
        self, limit: int, window: float, clock=time.monotonic, trickle: float = 1.0
    ) -> None:
        self.limit, self.window, self.trickle, self._clock = limit, window, trickle, clock
        self._failures: dict[ThrottleKey, deque[float]] = defaultdict(deque)
        self._judged: dict[
            ThrottleKey, float
        ] = {}  # key -> when its last trickle attempt was judged

    def blocked(self, key: ThrottleKey) -> bool:
        failures = self._failures.get(key)
        if not failures:
            return False
        now = self._clock()
        cutoff = now - self.window
        while failures and failures[0] < cutoff:
            failures.popleft()
        if not failures:
            del self._failures[key]
            self._judged.pop(key, None)
            return False
        if len(failures) < self.limit:
            return False
        if now - self._judged.get(key, float("-inf")) >= self.trickle:
            self._judged[key] = now  # this one is judged
            return False
        return True

    def fail(self, key: ThrottleKey) -> None:
        self._failures[key].append(self._clock())


class DirectoryUnavailable(RuntimeError):
    """The database could not be asked and nothing (not even stale) is cached."""


class TenantDirectory:
    def __init__(
        self,
        store: TenantStore,
        *,
        ttl: float = 60.0,
        negative_ttl: float = 2.0,
        failures_per_source: int = 20,
        failures_per_device: int = 50,
        failure_window: float = 10.0,
        clock=time.monotonic,
        service_key: bytes | None = None,
    ) -> None:
        self.store = store
        self.service_key = service_key  # verifies the portal's service tokens; None: refused
        self.ttl, self.negative_ttl, self._clock = ttl, negative_ttl, clock
        self._devices: dict[tuple[str, str], tuple[float, DeviceRecord | None]] = {}
        self._policies: dict[str, tuple[float, TenantPolicy | None]] = {}
        # (tenant, device) -> {sha256(secret): credential id} of secrets that verified
        self._verified: dict[tuple[str, str], dict[bytes, int]] = {}
        # (address, user name) -> failures; (tenant, device) -> failures
        self.by_source = FailureThrottle(failures_per_source, failure_window, clock)
        self.by_device = FailureThrottle(failures_per_device, failure_window, clock)
        self.stats: dict[str, int] = defaultdict(int)

    # -- cache maintenance (driven by the control plane's notifications) --------------------

    def forget_device(self, tenant: str, device: str) -> None:
        self._devices.pop((tenant, device), None)
        self._verified.pop((tenant, device), None)

    def forget_tenant(self, tenant: str) -> None:
        self._policies.pop(tenant, None)
        for key in [k for k in self._devices if k[0] == tenant]:
            self.forget_device(*key)

    def forget_all(self) -> None:
        self._devices.clear()
        self._policies.clear()
        self._verified.clear()

    # -- lookups ----------------------------------------------------------------------------

    async def device(self, tenant: str, name: str) -> DeviceRecord | None:
        key = (tenant, name)
        cached = self._devices.get(key)
        now = self._clock()
        if cached and cached[0] > now:
            self.stats["device_cache_hits"] += 1
            return cached[1]
        self.stats["device_cache_misses"] += 1
        try:
            record = await self.store.device(tenant, name)
        except Exception as exc:
            return self._stale(cached, "device", exc)
        found = record is not None and record.device_id is not None
        self._devices[key] = (now + (self.ttl if found else self.negative_ttl), record)
        return record

    async def policy(self, tenant: str) -> TenantPolicy | None:
        cached = self._policies.get(tenant)
        now = self._clock()
        if cached and cached[0] > now:
            return cached[1]
        try:
            policy = await self.store.policy(tenant)
        except Exception as exc:
            return self._stale(cached, "policy", exc)
        self._policies[tenant] = (now + (self.ttl if policy else self.negative_ttl), policy)
        return policy

    def _stale(self, cached: tuple[float, Any] | None, what: str, exc: Exception) -> Any:
        """The database is away: an expired entry beats refusing every device (the NOTIFY
        listener reloads everything once it is back)."""
        self.stats[f"{what}_lookup_failures"] += 1
        if cached is None:
            raise DirectoryUnavailable(f"{what} lookup failed: {exc}") from exc
        log.warning("%s lookup failed (%s); serving the cached entry", what, exc)
        return cached[1]

    def cached_policy(self, tenant: str) -> TenantPolicy | None:
        """The policy if cached (no I/O): for hooks on the hot path."""
        cached = self._policies.get(tenant)
        return cached[1] if cached else None

    # -- the decision -----------------------------------------------------------------------

    async def authenticate(
        self, username: str | None, password: bytes | None, client_id: str, address: str
    ) -> Decision:
        source = (address, (username or "")[:256])
        if self.by_source.blocked(source):
            return Decision(
                ReasonCode.CONNECTION_RATE_EXCEEDED,
                "too many failed attempts for this user name from this address",
            )
        tenant, _, device = (username or "").partition("/")
        if not tenant or not device or "/" in device or len(username or "") > 256:
            return self._fail(
                source, ReasonCode.BAD_USER_NAME_OR_PASSWORD, "username must be tenant/device"
            )
        if device in service_identity.SERVICE_DEVICES:
            return await self._service(tenant, device, password, client_id, source)
        try:
            record = await self.device(tenant, device)
            policy = await self.policy(tenant) if record is not None else None
        except DirectoryUnavailable as exc:
            log.warning("refusing %s: %s", username, exc)
            return Decision(
                ReasonCode.SERVER_UNAVAILABLE, "authentication backend unavailable", tenant
            )
        key = (tenant, device)
        if record is None:
            return self._fail(source, ReasonCode.BAD_USER_NAME_OR_PASSWORD, "unknown tenant")
        if not record.tenant_active:
            return self._fail(source, ReasonCode.BANNED, "tenant suspended", tenant)
        if record.device_id is None:
            return self._fail(
                source, ReasonCode.BAD_USER_NAME_OR_PASSWORD, "unknown device", tenant
            )
        if not record.enabled:
            return self._fail(source, ReasonCode.NOT_AUTHORIZED, "device disabled", tenant)
        if self.by_device.blocked(key):
            # Guessing this device's secret from many addresses: a secret that verified before
            # still passes (no hashing); new guesses wait for the throttle's trickle.
            credential = self._known_secret(record, password) if password else None
            if credential is None:
                self.by_source.fail(source)
                self.stats["rejected_0x9f"] += 1
                return Decision(
                    ReasonCode.CONNECTION_RATE_EXCEEDED, "too many failed attempts", tenant
                )
        else:
            credential = self._secret_ok(record, password) if password else None
            if credential is None:
                return self._fail(
                    source,
                    ReasonCode.BAD_USER_NAME_OR_PASSWORD,
                    "wrong or expired secret",
                    tenant,
                    key,
                )
        assigned = self._client_id(record, client_id)
        if assigned is None:
            return self._fail(
                source, ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "client id not allowed", tenant
            )
        if policy is None or not policy.active:
            return self._fail(source, ReasonCode.BANNED, "tenant suspended", tenant)
        self.stats["accepted"] += 1
        return Decision(
            ReasonCode.SUCCESS,
            "",
            tenant,
            device,
            assigned,
            policy,
            credential.id,
            credential.expires_at,
        )

    async def admit(
        self, tenant: str, device: str, client_id: str, address: str, username: str | None
    ) -> Decision:
        """For an identity proven otherwise (a client certificate, a JWT): may this device
        connect now? The same checks as after a secret, the secret aside. A user name, when the
        client sends one, must name the same device."""
        source = (address, (username or "")[:256])
        if self.by_source.blocked(source):
            return Decision(
                ReasonCode.CONNECTION_RATE_EXCEEDED,
                "too many failed attempts for this user name from this address",
            )
        if username and username != f"{tenant}/{device}":
            return self._fail(
                source,
                ReasonCode.BAD_USER_NAME_OR_PASSWORD,
                "user name does not match the identity",
                tenant,
            )
        try:
            record = await self.device(tenant, device)
            policy = await self.policy(tenant) if record is not None else None
        except DirectoryUnavailable:
            return Decision(
                ReasonCode.SERVER_UNAVAILABLE, "authentication backend unavailable", tenant
            )
        if record is None or record.device_id is None:
            return self._fail(
                source, ReasonCode.BAD_USER_NAME_OR_PASSWORD, "unknown device", tenant
            )
        if not record.tenant_active or policy is None or not policy.active:
            return self._fail(source, ReasonCode.BANNED, "tenant suspended", tenant)
        if not record.enabled:
            return self._fail(source, ReasonCode.NOT_AUTHORIZED, "device disabled", tenant)
        assigned = self._client_id(record, client_id)
        if assigned is None:
            return self._fail(
                source, ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "client id not allowed", tenant
            )
        self.stats["accepted"] += 1
        return Decision(ReasonCode.SUCCESS, "", tenant, device, assigned, policy)

    def refuse(
        self, address: str, username: str | None, code: int, reason: str, tenant: str = ""
    ) -> Decision:
        """A failed proof of identity (certificate, JWT): counted against its source."""
        return self._fail((address, (username or "")[:256]), code, reason, tenant)

    async def scram_identity(
        self, username: str | None, client_id: str, address: str
    ) -> tuple[Decision, list | None]:
        """For SCRAM-SHA-256: who the user name names, whether it may connect now (the secret
        aside: the exchange proves it), and the verifiers of its live credentials, newest first,
        as `(credential, (salt, stored key, server key, iterations))` pairs."""
        source = (address, (username or "")[:256])
        if self.by_source.blocked(source):
            return Decision(ReasonCode.CONNECTION_RATE_EXCEEDED, "too many failed attempts"), None
        tenant, _, device = (username or "").partition("/")
        if not tenant or not device or "/" in device or device in service_identity.SERVICE_DEVICES:
            return self._fail(
                source, ReasonCode.BAD_USER_NAME_OR_PASSWORD, "username must be tenant/device"
            ), None
        try:
            record = await self.device(tenant, device)
            policy = await self.policy(tenant) if record is not None else None
        except DirectoryUnavailable:
            return Decision(
                ReasonCode.SERVER_UNAVAILABLE, "authentication backend unavailable", tenant
            ), None
        if record is None or record.device_id is None:
            return self._fail(
                source, ReasonCode.BAD_USER_NAME_OR_PASSWORD, "unknown device", tenant
            ), None
        if not record.tenant_active or policy is None or not policy.active:
            return self._fail(source, ReasonCode.BANNED, "tenant suspended", tenant), None
        if not record.enabled:
            return self._fail(source, ReasonCode.NOT_AUTHORIZED, "device disabled", tenant), None
        if self.by_device.blocked((tenant, device)):
            return Decision(
                ReasonCode.CONNECTION_RATE_EXCEEDED, "too many failed attempts", tenant
            ), None
        assigned = self._client_id(record, client_id)
        if assigned is None:
            return self._fail(
                source, ReasonCode.CLIENT_IDENTIFIER_NOT_VALID, "client id not allowed", tenant
            ), None
        now = datetime.now(UTC)
        verifiers = [
            (c, parsed)
            for c in record.credentials
            if (c.expires_at is None or c.expires_at > now)
            and (parsed := parse_scram_verifier(c.scram_verifier)) is not None
        ]
        return Decision(ReasonCode.SUCCESS, "", tenant, device, assigned, policy), verifiers or None

    async def _service(
        self, tenant: str, device: str, password: bytes | None, client_id: str, source: tuple
    ) -> Decision:
        """A service identity of one tenant: the portal's or the rules' (`service_identity`)."""
        token = (password or b"").decode("utf-8", "replace")
        if self.service_key is None or not service_identity.verify(
            self.service_key, tenant, client_id, token, device=device
        ):  # no tenant named: anyone may type any name here (it must not become a label)
            return self._fail(source, ReasonCode.BAD_USER_NAME_OR_PASSWORD, "bad service token")
        try:
            policy = await self.policy(tenant)
        except DirectoryUnavailable:
            return Decision(
                ReasonCode.SERVER_UNAVAILABLE, "authentication backend unavailable", tenant
            )
        if policy is None:
            return self._fail(source, ReasonCode.BAD_USER_NAME_OR_PASSWORD, "unknown tenant")
        if not policy.active:
            return self._fail(source, ReasonCode.BANNED, "tenant suspended", tenant)
        return Decision(ReasonCode.SUCCESS, "", tenant, device, client_id, policy)

    def _fail(
        self,
        source: tuple[str, str],
        code: int,
        reason: str,
        tenant: str = "",
        device: tuple[str, str] | None = None,
    ) -> Decision:
        """Count a failure against its source (address, user name) and, for a wrong secret of
        an existing device, against that device."""
        self.by_source.fail(source)
        if device is not None:
            self.by_device.fail(device)
        self.stats[f"rejected_{code:#04x}"] += 1
        return Decision(code, reason, tenant)

    @staticmethod
    def _live(record: DeviceRecord) -> dict[int, CredentialRecord]:
        now = datetime.now(UTC)
        return {c.id: c for c in record.credentials if c.expires_at is None or c.expires_at > now}

    def _known_secret(self, record: DeviceRecord, password: bytes) -> CredentialRecord | None:
        """The live credential this secret verified against before (no hashing)."""
        known = self._verified.get((record.tenant, record.name), {})
        credential_id = known.get(hashlib.sha256(password).digest())
        return self._live(record).get(credential_id) if credential_id is not None else None

    def _secret_ok(self, record: DeviceRecord, password: bytes) -> CredentialRecord | None:
        """The live credential whose secret this is; None if none (wrong, expired, revoked)."""
        known = self._known_secret(record, password)
        if known is not None:
            return known
        for credential in self._live(record).values():
            if verify_secret(password, credential.secret_hash):
                key = (record.tenant, record.name)
                self._verified.setdefault(key, {})[hashlib.sha256(password).digest()] = (
                    credential.id
                )
                return credential
        return None

    @staticmethod
    def _client_id(record: DeviceRecord, client_id: str) -> str | None:
        policy = record.client_id_policy
        if client_id.startswith("$"):
            return None  # `$` client ids belong to service identities
        if policy == "exact":
            return record.name if client_id in ("", record.name) else None
        if policy == "pattern":
            return client_id if client_id_matches(record.client_id_pattern, client_id) else None
        return client_id  # any: an empty id is assigned by the broker

"""Device identity beyond secrets, on the broker: client certificates (mTLS) and JWT passwords.

The TLS listener asks for a client certificate and lets any chain the client proves it holds the
key of through to CONNECT (`tls_client_chains` says why OpenSSL's store cannot be the judge when
tenants register CAs of the same name). *Which* tenant and device it is, and whether that is
still true (revoked, expired), is decided here at CONNECT, against the tables:

- a certificate registered by its SHA-256 fingerprint for the device the user name names;
- otherwise the registered CA it chains up to names the tenant and the certificate's subject CN
  the device (a tenant registers a CA only with proof that it holds the CA's key:
  `tenants.devices.identity.ca_register`). The CA may have signed it directly, or through
  intermediates the device sends with its certificate (as AWS IoT accepts); an intermediate
  nobody registered anchors nothing. The path is validated by `cryptography`'s X.509 verifier
  (`chain_verification.verify_client_chain`): per tenant, with only that tenant's registered CAs as anchors,
  by signature, with validity, basic constraints (a leaf is no CA), key usages, name
  constraints and key sizes (RSA at least 2048 bits, EC at least P-256) enforced, in a thread
  and within a deadline (`VERIFY_DEADLINE`). The candidate CAs are found by the issuer's name
  and key identifier (only the user name's or endpoint's tenant's, when the client names one),
  at most `MAX_CANDIDATES` of them, so another tenant's CA of the same name neither vouches for
  a device nor stands in the way of its own CA.

A user name, if the client sends one, must agree (`tenant/device`). A JWT password is checked
against the tenant's registered keys (`common.security.device_credentials.verify_jwt`).

Every identity is labelled (`ca:ID`, `cert:ID`, `jwt:ID`) on the connection's `AuthResult`, so
revoking one ends exactly the connections it admitted (`end_connections`).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from common.contracts import tables
from common.security.device_credentials import (
    IdentityError,
    ParsedCertificate,
    PublicKey,
    check_valid,
    fingerprint,
    parse_certificate,
)
from data_plane.tenancy.ca_index import CaIndex, authority_key_id
from data_plane.tenancy.chain_verification import (
    MAX_INTERMEDIATES,
    start_processes,
    verify_off_loop,
)
from data_plane.tenancy.tls_client_chains import ClientCertificateContext, UnavailableError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CertificateIdentity:
    tenant: str
    device: str
    label: str  # `ca:ID`, `cert:ID` or `ca:ID cert:ID`: what revoking ends
    not_after: datetime  # the earliest notAfter of the chain: the connection ends then


# Registered CAs tried per CONNECT, at most (each costs a signature check or so).
MAX_CANDIDATES = 8
# Seconds a chain's check may take (queued behind others included) before it is refused.
VERIFY_DEADLINE = 2.0


_CA_SQL = f"""
SELECT c.id, t.slug, c.pem, c.revoked_at IS NOT NULL
  FROM {tables.CA_CERTIFICATE} c JOIN {tables.TENANT} t ON t.id = c.tenant_id
 WHERE c.subject = %s
 ORDER BY c.revoked_at IS NOT NULL, c.id
"""
# One tenant's CAs of a subject: at most its plan's `max_ca_certificates` live ones.
_TENANT_CA_SQL = f"""
SELECT c.id, t.slug, c.pem, c.revoked_at IS NOT NULL
  FROM {tables.CA_CERTIFICATE} c JOIN {tables.TENANT} t ON t.id = c.tenant_id
 WHERE c.subject = %s AND t.slug = %s
 ORDER BY c.revoked_at IS NOT NULL, c.id
"""
_DEVICE_CERT_SQL = f"""
SELECT c.id, t.slug, d.name, c.not_after
  FROM {tables.DEVICE_CERTIFICATE} c
  JOIN {tables.DEVICE} d ON d.id = c.device_id
  JOIN {tables.TENANT} t ON t.id = c.tenant_id
 WHERE c.fingerprint = %s AND t.slug = %s AND d.name = %s AND c.revoked_at IS NULL
"""
# The tenant's registrations of one certificate (live ones first): a certificate its registered
# CA signed may also be registered by fingerprint, and then revoking that registration refuses it.
_REGISTRATIONS_SQL = f"""
SELECT c.id, d.name, c.revoked_at IS NULL
  FROM {tables.DEVICE_CERTIFICATE} c
  JOIN {tables.DEVICE} d ON d.id = c.device_id
  JOIN {tables.TENANT} t ON t.id = c.tenant_id
 WHERE t.slug = %s AND c.fingerprint = %s
 ORDER BY c.revoked_at IS NOT NULL, c.id DESC
"""
_JWT_KEYS_SQL = f"""
SELECT k.id, k.kid, k.algorithm, k.public_key
  FROM {tables.JWT_KEY} k JOIN {tables.TENANT} t ON t.id = k.tenant_id
 WHERE t.slug = %s AND k.revoked_at IS NULL
"""
# Anchors: (kind, the CA's subject or the device certificate's fingerprint, PEM).
_ANCHORS_SQL = f"""
SELECT 'ca', subject, pem FROM {tables.CA_CERTIFICATE} WHERE revoked_at IS NULL
UNION ALL
SELECT 'cert', fingerprint, pem FROM {tables.DEVICE_CERTIFICATE} WHERE revoked_at IS NULL
"""
_ANCHOR_SQL = {
    "ca": f"SELECT 'ca', subject, pem FROM {tables.CA_CERTIFICATE}"
    " WHERE id = ANY(%s) AND revoked_at IS NULL",
    "cert": f"SELECT 'cert', fingerprint, pem FROM {tables.DEVICE_CERTIFICATE}"
    " WHERE id = ANY(%s) AND revoked_at IS NULL",
}


class IdentityStore:
    """Reads of the identity tables, cached until a notification says they changed (`forget`)
    and at most `ttl` seconds; misses are cached briefly too, so a stranger's certificates cost
    one query per `negative_ttl`."""

    def __init__(
        self, pool: AsyncConnectionPool, *, ttl: float = 60.0, negative_ttl: float = 2.0
    ) -> None:
        self.pool, self.ttl, self.negative_ttl = pool, ttl, negative_ttl
        self._cache: dict[tuple, tuple[float, Any]] = {}
        self._reading: dict[tuple, asyncio.Future] = {}  # CA indexes being read (`ca_index`)

    def forget(self) -> None:
        """Registrations and revocations are rare (and rate-limited per tenant on the control
        plane): forget everything."""
        self._cache.clear()

    async def _cached(self, key: tuple, sql: str, args: tuple) -> list[tuple]:
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        async with self.pool.connection() as conn:
            cursor = conn.cursor(row_factory=tuple_row)
            rows = await (await cursor.execute(sql, args)).fetchall()
        if len(self._cache) > 50_000:
            self._cache.clear()
        self._cache[key] = (now + (self.ttl if rows else self.negative_ttl), rows)
        return rows

    async def cas_named(self, subject: str) -> list[tuple[int, str, ParsedCertificate, bool]]:
        """Registered CAs of this subject, live ones first: (id, tenant, CA, revoked)."""
        return [ca.row for ca in (await self.ca_index(subject)).cas]

    async def ca_index(self, subject: str, tenant: str = "") -> CaIndex:
        """The registered CAs of this subject (only `tenant`'s, if given), parsed and indexed
        by key identifier (`CaIndex`), cached as the other reads. Parsing a few hundred CAs
        takes tens of milliseconds: it runs in a thread, once per read however many CONNECTs
        wait for it."""
        key = ("ca-index", subject, tenant)
        hit = self._cache.get(key)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        reading = self._reading.get(key)
        if reading is None:
            reading = self._reading[key] = asyncio.ensure_future(self._read_index(key))
            reading.add_done_callback(lambda _done: self._reading.pop(key, None))
        index: CaIndex = await asyncio.shield(reading)
        return index

    async def _read_index(self, key: tuple) -> CaIndex:
        _, subject, tenant = key
        sql, args = (_TENANT_CA_SQL, (subject, tenant)) if tenant else (_CA_SQL, (subject,))
        async with self.pool.connection() as conn:
            cursor = conn.cursor(row_factory=tuple_row)
            rows = await (await cursor.execute(sql, args)).fetchall()
        index = (
            await asyncio.get_running_loop().run_in_executor(None, CaIndex.parsed, rows)
            if rows
            else CaIndex([])
        )
        if len(self._cache) > 50_000:
            self._cache.clear()
        self._cache[key] = (time.monotonic() + (self.ttl if rows else self.negative_ttl), index)
        return index

    async def device_certificate(
        self, fingerprint: str, tenant: str, device: str
    ) -> tuple[int, str, str] | None:
        key = ("cert", fingerprint, tenant, device)
        rows = await self._cached(key, _DEVICE_CERT_SQL, (fingerprint, tenant, device))
        return (rows[0][0], rows[0][1], rows[0][2]) if rows else None

    async def registrations(self, tenant: str, fingerprint: str) -> list[tuple[int, str, bool]]:
        """The tenant's registrations of this certificate: (id, device, live), live first."""
        key = ("registrations", tenant, fingerprint)
        rows = await self._cached(key, _REGISTRATIONS_SQL, (tenant, fingerprint))
        return [(row[0], row[1], row[2]) for row in rows]

    async def jwt_keys(self, tenant: str) -> list[tuple[int, PublicKey]]:
        rows = await self._cached(("jwt", tenant), _JWT_KEYS_SQL, (tenant,))
        return [(row[0], PublicKey(row[1], row[2], row[3])) for row in rows]

    async def anchors(
        self, kind: str | None = None, ids: list[int] | None = None
    ) -> list[tuple[str, str, str]]:
        """Live registered anchors (all, or these of one kind): (kind, CA subject or device
        certificate fingerprint, PEM)."""
        async with self.pool.connection() as conn:
            cursor = conn.cursor(row_factory=tuple_row)
            if kind is None:
                rows = await (await cursor.execute(_ANCHORS_SQL)).fetchall()
            else:
                rows = await (await cursor.execute(_ANCHOR_SQL[kind], (ids or [],))).fetchall()
        return [(row[0], row[1], row[2]) for row in rows]


async def identify_certificate(
    store: IdentityStore,
    chain: bytes | Sequence[bytes],
    username: str | None = None,
    *,
    endpoint_tenant: str | None = None,
    deadline: float = VERIFY_DEADLINE,
) -> CertificateIdentity:
    """Which tenant's device this certificate is, or IdentityError saying why none. `chain` is
    the device's certificate (DER), then the certificates it sent with it. A certificate
    registered for one device counts only with that device's user name (it proves the key, not
    the tenant: anyone can register a certificate they have seen); a CA-issued one names its
    device by itself (registering a CA needs proof of its key). `endpoint_tenant`: the tenant
    the client's server name (SNI) chose; then it is that tenant's device or none."""
    ders = [chain] if isinstance(chain, bytes) else list(chain)
    try:
        presented = [parse_certificate(der) for der in ders[: MAX_INTERMEDIATES + 2]]
    except IdentityError:
        raise IdentityError("unreadable client certificate") from None
    if not presented:
        raise IdentityError("no client certificate")
    leaf = presented[0]
    check_valid(leaf)  # a clear reason; the verifier checks every certificate's validity too
    _check_usable(leaf, as_ca=False)
    tenant, _, device = (username or "").partition("/")
    if endpoint_tenant is not None:
        if tenant and tenant != endpoint_tenant:
            raise IdentityError(f"the user name's tenant is not the endpoint's ({endpoint_tenant})")
        tenant = endpoint_tenant
    if tenant and device:
        registered = await store.device_certificate(leaf.fingerprint, tenant, device)
        if registered is not None:  # anchored on itself; the rest of the policy still applies
            await verify_off_loop(leaf.certificate, [leaf.certificate], [], deadline)
            cert_id, tenant, device = registered
            return CertificateIdentity(tenant, device, f"cert:{cert_id}", leaf.not_after)
    if not leaf.common_name:
        raise IdentityError("the certificate's subject has no CN naming the device")
    candidates = await _candidate_cas(store, presented, tenant)
    intermediates = [c.certificate for c in presented[1:]]
    why = "client certificate not registered by any tenant (CA or fingerprint)"
    for owner in dict.fromkeys(owner for _, owner, _, revoked in candidates if not revoked):
        mine = [(i, ca, revoked) for i, o, ca, revoked in candidates if o == owner]
        live = {ca.fingerprint: i for i, ca, revoked in mine if not revoked}
        anchors = [ca.certificate for _, ca, revoked in mine if not revoked]
        try:
            path = await verify_off_loop(leaf.certificate, anchors, intermediates, deadline)
        except IdentityError as exc:
            why = str(exc)
            continue
        used = [fingerprint(cert.public_bytes(Encoding.DER)) for cert in path]
        revoked_cas = {ca.fingerprint for _, ca, revoked in mine if revoked} - set(live)
        if revoked_cas & set(used):  # a tenant revoked this CA: what it signed is refused, even
            # if a CA above it is still registered
            raise IdentityError("the certificate chains through a revoked CA")
        not_after = min(cert.not_valid_after_utc for cert in path)
        label = await _ca_label(store, live[used[-1]], owner, leaf)
        return CertificateIdentity(owner, leaf.common_name, label, not_after)
    if any(revoked for *_, revoked in candidates) and not any(
        not revoked for *_, revoked in candidates
    ):
        why = "the certificate chains through a revoked CA"
    raise IdentityError(why)


async def _candidate_cas(
    store: IdentityStore, presented: list[ParsedCertificate], tenant: str
) -> list[tuple[int, str, ParsedCertificate, bool]]:
    """The registered CAs that may have signed a certificate of the chain, at most
    `MAX_CANDIDATES`: found by the issuer's name (only the tenant's, when the client names it),
    then by key identifier. A certificate's Authority Key Identifier must be the CA key's
    (RFC 5280's SHA-1 of the key, computed here) or its stated Subject Key Identifier; a CA
    whose key identifier is its key's comes first, one that only states another's (copied, as
    a look-alike does) after; then the nearest to the device's certificate (whose tenant's CA
    is tried first). Which one signed is decided by signature (`_verified`). A device whose
    certificate has no Authority Key Identifier, connecting with neither user name nor
    endpoint, can be crowded out by many tenants' CAs of its CA's name: those name their
    tenant (user name or endpoint) to be immune."""
    found: dict[int, tuple[int, int, tuple[int, str, ParsedCertificate, bool]]] = {}
    for depth, cert in enumerate(presented):
        wanted = authority_key_id(cert.certificate)
        index = await store.ca_index(cert.issuer, tenant)
        taken = 0
        # Each list is best first: its first `MAX_CANDIDATES` new ones are all that can rank.
        for registered in index.matching(wanted):
            if taken >= MAX_CANDIDATES:
                break
            if (tenant and registered.tenant != tenant) or registered.id in found:
                continue
            honest = registered.honest_for(wanted)
            found[registered.id] = (0 if honest else 1, depth, registered.row)
            taken += 1
    ranked = sorted(found.values(), key=lambda item: (item[0], item[1], item[2][3], item[2][0]))
    return [row for *_, row in ranked[:MAX_CANDIDATES]]


async def _ca_label(store: IdentityStore, ca_id: int, tenant: str, leaf: ParsedCertificate) -> str:
    """What revoking ends, for a certificate a registered CA vouches for: the CA, and also its
    registration by fingerprint for the device its CN names, if the tenant made one (imported
    from AWS, say): revoking either then ends the connection. A certificate whose registrations
    the tenant all revoked is refused, its CA notwithstanding (AWS's REVOKED certificate)."""
    registrations = await store.registrations(tenant, leaf.fingerprint)
    if registrations and not any(live for _, _, live in registrations):
        raise IdentityError("the certificate was revoked by its tenant")
    mine = next((i for i, d, live in registrations if live and d == leaf.common_name), None)
    return f"ca:{ca_id}" if mine is None else f"ca:{ca_id} cert:{mine}"


def _check_usable(cert: ParsedCertificate, *, as_ca: bool) -> None:
    """What OpenSSL's "TLS client" purpose checks of each certificate of a client's chain:
    extended key usage, if stated, allows client authentication; a device's key usage, if
    stated, allows signing; and no critical extension is one we cannot read."""
    extensions = cert.certificate.extensions
    for extension in extensions:
        if extension.critical and isinstance(extension.value, x509.UnrecognizedExtension):
            raise IdentityError(f"unknown critical extension {extension.oid.dotted_string}")
    try:
        usages = extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        pass
    else:
        allowed = {ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE}
        if not allowed & set(usages):
            raise IdentityError("the certificate's extended key usage excludes TLS clients")
    if as_ca:
        return
    try:
        usage = extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        return
    if not (usage.digital_signature or usage.key_agreement):
        raise IdentityError("the certificate's key usage allows no signing")


class TrustAnchors:
    """Which client certificate chains are worth a lookup at CONNECT: those in which some
    certificate names, as its issuer, a CA some tenant registered, or whose device certificate
    some tenant registered (by fingerprint), and a few others a second (`worth_a_lookup`). A
    filter that keeps strangers' chains from costing a query each, not a verdict: it picks no issuer, so what one tenant registers
    cannot change how another's devices fare; `identify_certificate` decides, by signature and
    per tenant, whose device it is and whether it is still valid and not revoked. The names
    only grow (revoked ones are refused by the verdict) until `reload` reads them afresh.

    `attach` is where a TLS listener starts: only on a context whose handshakes leave the
    verdict to CONNECT (`tls_client_chains.ClientCertificateContext`); on any other it raises,
    and the listener does not start (no shared OpenSSL store to fall back to)."""

    def __init__(self, store: IdentityStore) -> None:
        self.store = store
        self.issuers: set[str] = set()  # registered CAs' subjects
        self.fingerprints: set[str] = set()  # registered device certificates'
        self.attached = False
        self.lookups_per_second = 20  # of chains the filter does not know (`worth_a_lookup`)
        self._second, self._lookups = float("-inf"), 0

    async def attach(self, context: ssl.SSLContext) -> None:
        if not isinstance(context, ClientCertificateContext):
            raise UnavailableError(
                "client certificates need a ClientCertificateContext (pyOpenSSL): "
                "the TLS listener does not start"
            )
        self._remember(await self.store.anchors())
        self.attached = True
        start_processes()

    async def added(self, kind: str, ids: list[int]) -> None:
        if self.attached:
            self._remember(await self.store.anchors(kind, ids))

    async def reload(self) -> None:
        """After notifications were lost: what was registered meanwhile, less what was revoked."""
        if not self.attached:
            return
        anchors = await self.store.anchors()
        self.issuers, self.fingerprints = set(), set()
        self._remember(anchors)

    def worth_a_lookup(self, chain: list[bytes]) -> bool:
        """Whether CONNECT should look this chain up: yes when the filter knows its issuer or
        fingerprint; otherwise (registered a moment ago, its notification still on its way; or
        a stranger's) up to `lookups_per_second` such chains a second, the rest refused
        unjudged, so strangers' chains cannot turn into a query each."""
        if self.vouches_for(chain):
            return True
        now = time.monotonic()
        if now - self._second >= 1.0:
            self._second, self._lookups = now, 0
        self._lookups += 1
        return self._lookups <= self.lookups_per_second

    def vouches_for(self, chain: list[bytes]) -> bool:
        """`chain`: DER, the client's certificate first, then what it sent with it."""
        if not chain:
            return False
        if fingerprint(chain[0]) in self.fingerprints:
            return True
        for der in chain[: MAX_INTERMEDIATES + 2]:
            try:
                issuer = x509.load_der_x509_certificate(der).issuer.rfc4514_string()
            except ValueError:
                return False
            if issuer in self.issuers:
                return True
        return False

    def _remember(self, anchors: list[tuple[str, str, str]]) -> None:
        for kind, key, _pem in anchors:
            (self.issuers if kind == "ca" else self.fingerprints).add(key)


def end_connections(live: Any, label: str, reason_code: int) -> int:
    """Disconnect the connections an identity (`ca:ID`, `cert:ID`, `jwt:ID`) admitted (one
    connection's labels are separated by spaces: `ca:ID cert:ID`, see `_ca_label`)."""
    doomed = [
        conn
        for conn in list(getattr(live, "connections", ()))
        if label in (getattr(getattr(conn, "auth", None), "identity", "") or "").split()
    ]
    for conn in doomed:
        conn.disconnect(reason_code)
    return len(doomed)

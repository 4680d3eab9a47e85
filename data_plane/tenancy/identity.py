"""Device identity beyond secrets, on the broker: client certificates (mTLS) and JWT passwords.

The TLS listener asks for a client certificate (`CERT_OPTIONAL`); OpenSSL checks that the client
holds its certificate's key, and lets through to CONNECT only a chain in which some certificate
names a registered CA as its issuer, or whose device certificate is registered (`TrustAnchors`, a
filter that chooses no issuer: `tls_client_chains` says why OpenSSL's store cannot be the judge
when tenants register CAs of the same name). *Which* tenant and device it is, and whether that is
still true (revoked, expired), is decided here at CONNECT, against the tables:

- a certificate registered by its SHA-256 fingerprint for the device the user name names;
- otherwise the registered CA it chains up to names the tenant and the certificate's subject CN
  the device (a tenant registers a CA only with proof that it holds the CA's key:
  `tenants.devices.identity.ca_register`). The CA may have signed it directly, or through intermediates
  the device sends with its certificate (as AWS IoT accepts): the chain is walked up from the
  device's certificate, each link checked by signature, CA flag, path length and validity, until
  a CA some tenant registered signed the last one; that CA, and only a registered CA, anchors
  the chain and says whose device it is. An intermediate nobody registered anchors nothing. A
  CA is found by its signature, never by its name alone: every registered CA of the issuer's
  name is tried (only the user name's tenant's, when the client sends one), so another tenant's
  CA of the same name neither vouches for a device nor stands in the way of its own CA.

A user name, if the client sends one, must agree (`tenant/device`). A JWT password is checked
against the tenant's registered keys (`common.security.device_credentials.verify_jwt`).

Every identity is labelled (`ca:ID`, `cert:ID`, `jwt:ID`) on the connection's `AuthResult`, so
revoking one ends exactly the connections it admitted (`end_connections`).
"""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cryptography import x509
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
    issued_by,
    parse_certificate,
)
from data_plane.tenancy.tls_client_chains import judge_chains

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CertificateIdentity:
    tenant: str
    device: str
    label: str  # `ca:ID`, `cert:ID` or `ca:ID cert:ID`: what revoking ends
    not_after: datetime  # the earliest notAfter of the chain: the connection ends then


# Intermediates between a device certificate and its tenant's registered CA, at most.
MAX_INTERMEDIATES = 4


_CA_SQL = f"""
SELECT c.id, t.slug, c.pem, c.revoked_at IS NOT NULL
  FROM {tables.CA_CERTIFICATE} c JOIN {tables.TENANT} t ON t.id = c.tenant_id
 WHERE c.subject = %s
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

    def forget(self) -> None:
        """Registrations and revocations are rare: forget everything."""
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
        rows = await self._cached(("ca", subject), _CA_SQL, (subject,))
        return [(row[0], row[1], parse_certificate(row[2]), row[3]) for row in rows]

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
    store: IdentityStore, chain: bytes | Sequence[bytes], username: str | None = None
) -> CertificateIdentity:
    """Which tenant's device this certificate is, or IdentityError saying why none. `chain` is
    the device's certificate (DER), then the certificates it sent with it (or the chain a
    handshake verified). A certificate registered for one device counts only with that device's
    user name (it proves the key, not the tenant: anyone can register a certificate they have
    seen); a CA-issued one names its device by itself (registering a CA needs proof of its key)."""
    ders = [chain] if isinstance(chain, bytes) else list(chain)
    try:
        presented = [parse_certificate(der) for der in ders[: MAX_INTERMEDIATES + 2]]
    except IdentityError:
        raise IdentityError("unreadable client certificate") from None
    if not presented:
        raise IdentityError("no client certificate")
    leaf = presented[0]
    check_valid(leaf)  # the handshake checked too; the clock may have moved since
    _check_usable(leaf, as_ca=False)
    tenant, _, device = (username or "").partition("/")
    if tenant and device:
        registered = await store.device_certificate(leaf.fingerprint, tenant, device)
        if registered is not None:
            cert_id, tenant, device = registered
            return CertificateIdentity(tenant, device, f"cert:{cert_id}", leaf.not_after)
    if not leaf.common_name:
        raise IdentityError("the certificate's subject has no CN naming the device")
    path = [leaf]  # the device's certificate, then the intermediates that signed each link
    sent = presented[1:]
    while True:
        current = path[-1]
        for ca_id, owner, ca, revoked in await store.cas_named(current.issuer):
            if tenant and owner != tenant:
                continue  # the user name says whose device: another tenant's CA vouches for none
            if issued_by(current, ca) and _may_sign(ca, len(path) - 1):
                if revoked:  # a tenant revoked this CA: what it signed is refused, even if a
                    # CA above it is still registered (live registrations come first)
                    raise IdentityError("the certificate chains through a revoked CA")
                check_valid(ca)
                _check_usable(ca, as_ca=True)
                not_after = min(c.not_after for c in (*path, ca))
                label = await _ca_label(store, ca_id, owner, leaf)
                return CertificateIdentity(owner, leaf.common_name, label, not_after)
        if len(path) > MAX_INTERMEDIATES:
            break
        # Not a registered CA's: one of the certificates sent (in any order) must have signed it.
        above = next(
            (
                c
                for c in sent
                if all(c is not p for p in path)
                and issued_by(current, c)
                and _may_sign(c, len(path) - 1)
            ),
            None,
        )
        if above is None:
            break
        check_valid(above)
        _check_usable(above, as_ca=True)
        path.append(above)
    raise IdentityError("client certificate not registered by any tenant (CA or fingerprint)")


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


def _may_sign(ca: ParsedCertificate, intermediates_below: int) -> bool:
    """`ca` may sign a certificate with this many CA certificates below it (RFC 5280: a CA, with
    keyCertSign if it says how its key is used, within its pathLenConstraint)."""
    if not ca.is_ca:
        return False
    extensions = ca.certificate.extensions
    try:
        if not extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign:
            return False
    except x509.ExtensionNotFound:
        pass
    limit = extensions.get_extension_for_class(x509.BasicConstraints).value.path_length
    return limit is None or intermediates_below <= limit


class TrustAnchors:
    """Which client certificate chains the TLS listeners let through to CONNECT: those in which
    some certificate names, as its issuer, a CA some tenant registered, or whose device
    certificate some tenant registered (by fingerprint). A filter that keeps strangers' chains
    from costing a lookup, not a verdict: it picks no issuer, so what one tenant registers
    cannot change how another's devices fare; `identify_certificate` decides, at CONNECT and by
    signature, whose device it is and whether it is still valid and not revoked. The names only
    grow (revoked ones are refused at CONNECT) until `reload` reads them afresh.

    Where OpenSSL cannot be told to leave the verdict to Python (`judge_chains`), the anchors are
    loaded into the listener's OpenSSL store instead, as before (with its weakness, logged)."""

    def __init__(self, store: IdentityStore) -> None:
        self.store = store
        self.issuers: set[str] = set()  # registered CAs' subjects
        self.fingerprints: set[str] = set()  # registered device certificates'
        self.attached = False
        self.stores: list[ssl.SSLContext] = []  # contexts verifying with OpenSSL's store

    async def attach(self, context: ssl.SSLContext) -> None:
        context.verify_mode = ssl.CERT_OPTIONAL
        anchors = await self.store.anchors()
        self._remember(anchors)
        self.attached = True
        if judge_chains(context, self.vouches_for):
            return
        log.warning(
            "client certificates are verified against OpenSSL's store: a CA registered by one "
            "tenant under another's CA name can fail that tenant's devices"
        )
        # A registered anchor is trusted by itself: an intermediate CA, or a device's own
        # (possibly self-signed) certificate registered by fingerprint.
        context.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN
        self.stores.append(context)
        self._load(context, anchors)

    async def added(self, kind: str, ids: list[int]) -> None:
        if not self.attached:
            return
        anchors = await self.store.anchors(kind, ids)
        self._remember(anchors)
        for context in self.stores:
            self._load(context, anchors)

    async def reload(self) -> None:
        """After notifications were lost: what was registered meanwhile, less what was revoked."""
        if not self.attached:
            return
        anchors = await self.store.anchors()
        self.issuers, self.fingerprints = set(), set()
        self._remember(anchors)
        for context in self.stores:
            self._load(context, anchors)

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

    @staticmethod
    def _load(context: ssl.SSLContext, anchors: list[tuple[str, str, str]]) -> None:
        for _kind, _key, pem in anchors:
            try:
                context.load_verify_locations(cadata=pem)
            except (ssl.SSLError, ValueError) as exc:  # one bad row must not stop the rest
                log.warning("trust anchor not loaded: %s", exc)


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

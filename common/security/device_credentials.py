"""Device identity beyond secrets: X.509 client certificates and JWT passwords.

Pure functions over `cryptography` and PyJWT, shared by the control plane (checks what a tenant
registers, so a bad PEM is a 400 naming the problem) and the broker (checks what a device presents
at CONNECT). No I/O, no Django, nothing else of the project.

Certificates: a tenant registers a CA (a certificate with CA:TRUE); a device certificate issued
directly by it names the device in its subject CN. Or a tenant registers one device's own
certificate, recognised by the SHA-256 of its DER ("fingerprint").

JWT: a tenant registers public keys (PEM or a JWKS document), RS256 or ES256. A device sends a
JWT as its MQTT password: `sub` is the device (`device` or `tenant/device`), `exp` is required and
at most `MAX_LIFETIME` ahead, clocks may differ by `LEEWAY` seconds.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import jwt
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    PrivateKeyTypes,
    PublicKeyTypes,
)
from cryptography.x509.oid import NameOID

LEEWAY = 60  # seconds of clock skew tolerated on exp / nbf / iat
MAX_LIFETIME = 24 * 3600  # a JWT valid further ahead than this (plus leeway) is refused
ALGORITHMS = ("RS256", "ES256")
MAX_PEM = 16_384


class IdentityError(ValueError):
    """What is wrong with a certificate, key or token, in words a tenant can act on."""


@dataclass(frozen=True, slots=True)
class ParsedCertificate:
    certificate: x509.Certificate
    fingerprint: str  # SHA-256 of the DER, lowercase hex
    subject: str  # RFC 4514
    issuer: str  # RFC 4514
    common_name: str
    not_before: datetime
    not_after: datetime
    is_ca: bool


def fingerprint(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()


def parse_certificate(data: str | bytes) -> ParsedCertificate:
    """One certificate, PEM (text) or DER (bytes)."""
    try:
        if isinstance(data, str):
            if len(data) > MAX_PEM:
                raise IdentityError(f"a certificate PEM is at most {MAX_PEM} characters")
            if "-----BEGIN CERTIFICATE-----" not in data:
                raise IdentityError("expected a PEM certificate (-----BEGIN CERTIFICATE-----)")
            cert = x509.load_pem_x509_certificate(data.encode())
        else:
            cert = x509.load_der_x509_certificate(data)
    except IdentityError:
        raise
    except ValueError as exc:
        # Without cryptography's pointer to its FAQ: a tenant needs what is wrong, not a link.
        reason = str(exc).split(". See https://", 1)[0]
        raise IdentityError(f"not a readable certificate: {reason}") from None
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        is_ca = constraints.ca
    except x509.ExtensionNotFound:
        is_ca = False
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    common_name = str(names[0].value) if names else ""
    return ParsedCertificate(
        certificate=cert,
        fingerprint=fingerprint(cert.public_bytes(serialization.Encoding.DER)),
        subject=cert.subject.rfc4514_string(),
        issuer=cert.issuer.rfc4514_string(),
        common_name=common_name,
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        is_ca=is_ca,
    )


def parse_ca(pem: str, now: datetime | None = None) -> ParsedCertificate:
    """A CA a tenant registers: a CA certificate, valid now, that signed itself or was signed by
    some other CA (its chain above is not ours to check: devices' certificates are checked
    against it directly)."""
    parsed = parse_certificate(pem)
    if not parsed.is_ca:
        raise IdentityError("not a CA certificate (basicConstraints CA:TRUE is missing)")
    check_valid(parsed, now)
    return parsed


def parse_device_certificate(pem: str, now: datetime | None = None) -> ParsedCertificate:
    parsed = parse_certificate(pem)
    if parsed.is_ca:
        raise IdentityError("a CA certificate is not a device certificate (register it as a CA)")
    check_valid(parsed, now)
    return parsed


def check_valid(parsed: ParsedCertificate, now: datetime | None = None) -> None:
    now = now or datetime.now(UTC)
    if now < parsed.not_before:
        raise IdentityError(f"certificate not valid before {parsed.not_before.isoformat()}")
    if now > parsed.not_after:
        raise IdentityError(f"certificate expired on {parsed.not_after.isoformat()}")


def issued_by(device: ParsedCertificate, ca: ParsedCertificate) -> bool:
    """The CA signed the device certificate (issuer name and signature)."""
    try:
        device.certificate.verify_directly_issued_by(ca.certificate)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


# -- JWT ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PublicKey:
    kid: str
    algorithm: str  # RS256 | ES256
    pem: str  # SubjectPublicKeyInfo PEM


def _algorithm_for(key: PublicKeyTypes) -> str:
    if isinstance(key, rsa.RSAPublicKey):
        if key.key_size < 2048:
            raise IdentityError("RSA keys need at least 2048 bits")
        return "RS256"
    if isinstance(key, ec.EllipticCurvePublicKey):
        if not isinstance(key.curve, ec.SECP256R1):
            raise IdentityError("ES256 needs a P-256 key")
        return "ES256"
    raise IdentityError("only RSA (RS256) and P-256 (ES256) public keys are accepted")


def _spki_pem(key: PublicKeyTypes) -> str:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()


def parse_public_keys(text: str, *, kid: str = "", algorithm: str = "") -> list[PublicKey]:
    """Keys from a PEM public key (or certificate) or a JWKS document (`{"keys": [...]}`).
    A PEM key takes `kid` (required) and `algorithm` (inferred from the key when empty); JWKS keys
    carry their own `kid` and `alg`/`kty`."""
    text = (text or "").strip()
    if not text:
        raise IdentityError("a public key (PEM) or a JWKS document is required")
    if len(text) > 4 * MAX_PEM:
        raise IdentityError("at most 64 KiB of keys at once")
    if algorithm and algorithm not in ALGORITHMS:
        raise IdentityError(f"algorithm must be one of {', '.join(ALGORITHMS)}")
    if text.startswith("{"):
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise IdentityError(f"JWKS is not JSON: {exc}") from None
        entries = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(entries, list) or not entries:
            raise IdentityError('a JWKS document is {"keys": [...]} with at least one key')
        keys = []
        for index, entry in enumerate(entries):
            if not isinstance(entry, dict):
                raise IdentityError(f"keys[{index}] is not an object")
            try:
                jwk = jwt.PyJWK(entry)
            except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError) as exc:
                raise IdentityError(f"keys[{index}]: {exc}") from None
            if "d" in entry:
                raise IdentityError(f"keys[{index}] is a private key: register the public half")
            inferred = _algorithm_for(jwk.key)
            alg = entry.get("alg") or inferred
            if alg != inferred:
                raise IdentityError(f"keys[{index}]: alg {alg} does not fit the key ({inferred})")
            key_id = str(entry.get("kid") or kid or "")
            if not key_id:
                raise IdentityError(f"keys[{index}] has no kid")
            keys.append(PublicKey(key_id, alg, _spki_pem(jwk.key)))
        return keys
    if "PRIVATE KEY" in text:
        raise IdentityError("that is a private key: register the public key only")
    key: PublicKeyTypes
    try:
        if "BEGIN CERTIFICATE" in text:
            key = x509.load_pem_x509_certificate(text.encode()).public_key()
        else:
            key = serialization.load_pem_public_key(text.encode())
    except ValueError as exc:
        raise IdentityError(f"not a readable PEM public key: {exc}") from None
    inferred = _algorithm_for(key)
    if algorithm and algorithm != inferred:
        raise IdentityError(f"algorithm {algorithm} does not fit the key ({inferred})")
    if not kid:
        raise IdentityError("a PEM key needs a kid (a name for it)")
    return [PublicKey(kid, inferred, _spki_pem(key))]


def looks_like_jwt(password: bytes | None) -> bool:
    """Platform secrets are URL-safe base64 without dots; a JWT is three dotted parts whose
    header is a JSON object (base64 of `{"` starts with `eyJ`)."""
    return password is not None and password.startswith(b"eyJ") and password.count(b".") == 2


def verify_jwt(
    token: str,
    keys: list[PublicKey],
    *,
    tenant: str,
    device: str,
    now: float | None = None,
    leeway: int = LEEWAY,
) -> tuple[dict[str, Any], PublicKey]:
    """The claims of a token signed by one of `keys` for this device, and the key that verified
    it; IdentityError otherwise."""
    try:
        header = jwt.get_unverified_header(token)
    except jwt.InvalidTokenError as exc:
        raise IdentityError(f"malformed JWT: {exc}") from None
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        raise IdentityError(f"JWT alg must be one of {', '.join(ALGORITHMS)}")
    kid = header.get("kid")
    candidates = [k for k in keys if k.algorithm == alg and (kid is None or k.kid == kid)]
    if not candidates:
        raise IdentityError("no registered key of this tenant fits the JWT (kid/alg)")
    options: jwt.types.Options = {"require": ["exp", "sub"], "verify_aud": False}
    last: Exception | None = None
    for key in candidates:
        try:
            claims = jwt.decode(token, key.pem, algorithms=[alg], options=options, leeway=leeway)
            used = key
            break
        except jwt.InvalidSignatureError as exc:
            last = exc
        except jwt.ExpiredSignatureError:
            raise IdentityError("JWT expired") from None
        except jwt.InvalidTokenError as exc:
            raise IdentityError(f"JWT refused: {exc}") from None
    else:
        raise IdentityError(f"JWT signature does not verify with this tenant's keys ({last})")
    if claims.get("sub") not in (device, f"{tenant}/{device}"):
        raise IdentityError("JWT sub is not this device")
    current = now if now is not None else datetime.now(UTC).timestamp()
    if float(claims["exp"]) > current + MAX_LIFETIME + leeway:
        raise IdentityError(f"JWT exp is more than {MAX_LIFETIME} s ahead")
    return claims, used


# -- development certificates (make run, tests) ------------------------------------------------


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_ca(
    cn: str,
    *,
    days: int = 3650,
    signer: tuple[Any, ...] | None = None,
    path_length: int | None = 0,
    not_after: datetime | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A P-256 CA: (certificate, private key). Self-signed, or an intermediate signed by
    `signer` = (CA certificate, its key); `path_length` CAs may stand below it (None: any)."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC) - timedelta(minutes=5)
    issuer, signing_key = (signer[0].subject, signer[1]) if signer else (_name(cn), key)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(not_after or now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(signing_key, _sha256())
    )
    return cert, key


def make_leaf(
    cn: str,
    ca_cert: x509.Certificate | None,
    ca_key: CertificateIssuerPrivateKeyTypes | None,
    *,
    days: int = 825,
    not_before: datetime | None = None,
    not_after: datetime | None = None,
    server_names: list[str] | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate signed by `ca_key` (self-signed when `ca_cert` is None): (cert, key).
    `server_names`: DNS names / IP addresses for a server certificate."""
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    start = not_before or datetime.now(UTC) - timedelta(minutes=5)
    end = not_after or start + timedelta(days=days)
    issuer = ca_cert.subject if ca_cert is not None else _name(cn)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(cn))
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
    )
    if server_names:
        alt: list[x509.GeneralName] = []
        for name in server_names:
            try:
                alt.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alt.append(x509.DNSName(name))
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(ca_key if ca_key is not None else key, _sha256())
    return cert, key


def _sha256() -> hashes.SHA256:
    return hashes.SHA256()


def pem_of(obj: x509.Certificate | PrivateKeyTypes) -> str:
    """PEM text of a certificate or a private key (unencrypted PKCS#8, for development)."""
    if isinstance(obj, x509.Certificate):
        return obj.public_bytes(serialization.Encoding.PEM).decode()
    return obj.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()

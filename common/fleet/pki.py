"""The certificates of fleet provisioning by claim (AWS IoT's `CreateKeysAndCertificate`,
`CreateCertificateFromCsr`), issued by the CA the platform keeps for each tenant.

Every certificate this CA issues carries the subject CN `FLEET_CN`, which no device name can be
(device names have no `$` or `/`): the broker knows such a certificate by its SHA-256 fingerprint
(AWS's certificateId), recorded when it was issued, never by its name. Pure functions over
`cryptography`; no I/O, nothing else of the project.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    CertificatePublicKeyTypes,
    PrivateKeyTypes,
)
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from common.security.device_credentials import IdentityError, fingerprint, make_ca

FLEET_CN = "$fleet"  # the CN of every certificate a tenant's fleet CA issues
CERTIFICATE_DAYS = 3650  # AWS's provisioned certificates do not expire before 2049 either
MAX_CSR = 16_384


def new_authority(tenant: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A tenant's fleet CA: (certificate, private key), self-signed, P-256."""
    return make_ca(f"fleet provisioning CA of {tenant}", days=CERTIFICATE_DAYS + 365)


def load_key(pem: str) -> PrivateKeyTypes:
    return serialization.load_pem_private_key(pem.encode(), password=None)


def key_pem(key: PrivateKeyTypes) -> str:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def certificate_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def certificate_id(cert: x509.Certificate) -> str:
    """AWS's certificateId: the SHA-256 of the DER, hex (this platform's fingerprint)."""
    return fingerprint(cert.public_bytes(serialization.Encoding.DER))


def issue(
    ca_cert: x509.Certificate,
    ca_key: CertificateIssuerPrivateKeyTypes,
    public_key: CertificatePublicKeyTypes,
) -> x509.Certificate:
    """A TLS client certificate for `public_key`, signed by the fleet CA."""
    now = datetime.now(UTC) - timedelta(minutes=5)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, FLEET_CN)]))
        .issuer_name(ca_cert.subject)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + timedelta(days=CERTIFICATE_DAYS))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )


def issue_with_key(
    ca_cert: x509.Certificate, ca_key: CertificateIssuerPrivateKeyTypes
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A new P-256 key and its certificate (CreateKeysAndCertificate): (certificate, key)."""
    key = ec.generate_private_key(ec.SECP256R1())
    return issue(ca_cert, ca_key, key.public_key()), key


def issue_for_csr(
    ca_cert: x509.Certificate, ca_key: CertificateIssuerPrivateKeyTypes, csr_pem: str
) -> x509.Certificate:
    """A certificate for the key of a device's CSR (CreateCertificateFromCsr); the CSR must be
    signed by that key (proof the device holds it). Its subject is not copied: the CN is
    `FLEET_CN`, as for every certificate of this CA."""
    if not csr_pem or len(csr_pem) > MAX_CSR:
        raise IdentityError("certificateSigningRequest is missing or too long")
    try:
        csr = x509.load_pem_x509_csr(csr_pem.encode())
    except ValueError:
        raise IdentityError("certificateSigningRequest is not a PEM CSR") from None
    if not csr.is_signature_valid:
        raise IdentityError("certificateSigningRequest's signature is not valid")
    public_key = csr.public_key()
    if not isinstance(public_key, ec.EllipticCurvePublicKey | rsa.RSAPublicKey):
        raise IdentityError("certificateSigningRequest's key must be RSA or EC")
    return issue(ca_cert, ca_key, public_key)

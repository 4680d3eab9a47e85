"""The registered CAs of one subject as a CONNECT weighs them (`identity`): parsed once when
read, found by key identifier, the CA whose key identifier is its own key's first (a copied one
ranks last), so what a CONNECT looks through is a dictionary lookup and a few rows however many
CAs of the name there are."""

from __future__ import annotations

from dataclasses import dataclass

from cryptography import x509

from common.security.device_credentials import IdentityError, ParsedCertificate, parse_certificate


@dataclass(frozen=True, slots=True)
class RegisteredCa:
    """A registered CA as CONNECT weighs it: parsed, with its key identifier computed from its
    key (`own`, RFC 5280's SHA-1) and as its certificate states it (`stated`)."""

    id: int
    tenant: str
    ca: ParsedCertificate
    revoked: bool
    own: bytes | None
    stated: bytes | None

    @property
    def row(self) -> tuple[int, str, ParsedCertificate, bool]:
        return self.id, self.tenant, self.ca, self.revoked

    def honest_for(self, wanted: bytes | None) -> bool:
        """Whether the CA's key identifier is its key's (for a certificate whose Authority Key
        Identifier is `wanted`); a CA that only states another's (copied) is not."""
        return wanted == self.own if wanted is not None else self.stated in (None, self.own)


class CaIndex:
    """The registered CAs of one subject (all tenants', or one tenant's), parsed once when read,
    found by key identifier: what a CONNECT looks through is a dictionary lookup and at most
    `MAX_CANDIDATES` rows, however many CAs of the name there are."""

    __slots__ = ("by_key_id", "cas", "no_key_id")

    def __init__(self, cas: list[RegisteredCa]) -> None:
        self.cas = cas
        by_key_id: dict[bytes, list[RegisteredCa]] = {}
        for ca in cas:
            for key_id in dict.fromkeys(k for k in (ca.own, ca.stated) if k is not None):
                by_key_id.setdefault(key_id, []).append(ca)
        # Best first for each lookup (`_rank`), so a CONNECT reads the head of a list only.
        self.by_key_id = {
            k: sorted(v, key=lambda ca, k=k: _rank(ca, k)) for k, v in by_key_id.items()
        }
        self.no_key_id = sorted(cas, key=lambda ca: _rank(ca, None))

    @classmethod
    def parsed(cls, rows: list[tuple]) -> CaIndex:
        """From the table's rows (id, tenant, PEM, revoked): CPU-bound, run in a thread."""
        cas = []
        for ca_id, tenant, pem, revoked in rows:
            try:
                ca = parse_certificate(pem)
            except IdentityError:  # pragma: no cover - the control plane parsed it
                continue
            own, stated = _key_ids(ca.certificate)
            cas.append(RegisteredCa(ca_id, tenant, ca, revoked, own, stated))
        return cls(cas)

    def matching(self, wanted: bytes | None) -> list[RegisteredCa]:
        """The CAs that may have signed a certificate whose Authority Key Identifier is `wanted`
        (None: it states none, and any may have), best first."""
        return self.no_key_id if wanted is None else self.by_key_id.get(wanted, [])


def _rank(ca: RegisteredCa, wanted: bytes | None) -> tuple[int, bool, int]:
    return (0 if ca.honest_for(wanted) else 1, ca.revoked, ca.id)


def authority_key_id(cert: x509.Certificate) -> bytes | None:
    """The key identifier of the CA that signed `cert`, as `cert` states it (None: it does not)."""
    try:
        return cert.extensions.get_extension_for_class(
            x509.AuthorityKeyIdentifier
        ).value.key_identifier
    except x509.ExtensionNotFound:
        return None


def _key_ids(cert: x509.Certificate) -> tuple[bytes | None, bytes | None]:
    """A CA's key identifier as computed from its key, and as its certificate states it."""
    try:
        own = x509.SubjectKeyIdentifier.from_public_key(cert.public_key()).digest
    except (ValueError, TypeError):
        own = None
    try:
        stated = cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value.digest
    except x509.ExtensionNotFound:
        stated = None
    return own, stated

"""Device identity beyond secrets, on the control plane: a tenant's CA certificates, devices'
own certificates (by fingerprint) and JWT public keys. Writes (services) and reads (selectors) of
one small domain; each write announces `identity.*` so the broker adds a TLS anchor or ends the
connections a revoked one admitted (`data_plane.tenancy.control`)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from common.contracts.notifications import ChangeKind
from common.security.device_credentials import (
    IdentityError,
    issued_by,
    parse_ca,
    parse_certificate,
    parse_device_certificate,
    parse_public_keys,
)
from tenants.models import CaCertificate, Device, DeviceCertificate, JwtKey, Tenant
from tenants.notify import announce
from tenants.suspension import require_active


def _invalid(field: str, exc: Exception) -> ValidationError:
    return ValidationError({field: [str(exc)]})


# -- CA certificates ----------------------------------------------------------------------------


def registration_code(tenant: Tenant) -> str:
    """The CN a verification certificate must carry to register a CA for this tenant (AWS IoT's
    registration code): proof that whoever registers the CA holds its private key, so nobody can
    claim another's CA and have its devices land in their tenant."""
    import hashlib
    import hmac

    from django.conf import settings

    message = f"ca-registration:{tenant.id}:{tenant.slug}".encode()
    return hmac.new(settings.SECRET_KEY.encode(), message, hashlib.sha256).hexdigest()[:40]


def _check_possession(tenant: Tenant, ca, verification_pem: str) -> None:
    try:
        verification = parse_certificate(verification_pem or "")
    except IdentityError as exc:
        raise _invalid("verification_pem", exc) from None
    if verification.common_name != registration_code(tenant):
        raise ValidationError(
            {
                "verification_pem": [
                    "The verification certificate's CN must be this tenant's registration code "
                    "(GET /api/v1/cas/registration-code)."
                ]
            }
        )
    if not issued_by(verification, ca):
        raise ValidationError(
            {"verification_pem": ["The verification certificate is not signed by this CA."]}
        )


@transaction.atomic
def ca_register(
    *, tenant: Tenant, name: str, pem: str, verification_pem: str, auto_registration: bool = False
) -> CaCertificate:
    """AWS IoT's "register CA": device certificates it issues name their device in the CN.
    `verification_pem`: a certificate the CA signed whose CN is `registration_code(tenant)`."""
    require_active(tenant)
    try:
        parsed = parse_ca(pem)
    except IdentityError as exc:
        raise _invalid("pem", exc) from None
    _check_possession(tenant, parsed, verification_pem)
    ca = CaCertificate(
        tenant=tenant,
        name=name,
        pem=pem.strip() + "\n",
        fingerprint=parsed.fingerprint,
        subject=parsed.subject[:512],
        not_after=parsed.not_after,
        auto_registration=auto_registration,
    )
    try:
        ca.full_clean(exclude=["tenant"], validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise ValidationError(exc.message_dict) from None
    if CaCertificate.objects.filter(tenant=tenant, name=name).exists():
        raise ValidationError({"name": [f"A CA named {name!r} already exists."]})
    try:
        with transaction.atomic():
            ca.save()
    except IntegrityError:
        # Never say whose: the same CA registered by another tenant stays that tenant's secret.
        raise ValidationError({"pem": ["This CA certificate is already registered."]}) from None
    announce(tenant.slug, ChangeKind.IDENTITY_CA_ADDED, ids=[ca.id])
    return ca


@transaction.atomic
def ca_revoke(ca: CaCertificate) -> CaCertificate:
    if ca.revoked_at is None:
        ca.revoked_at = timezone.now()
        ca.save(update_fields=["revoked_at"])
        announce(ca.tenant.slug, ChangeKind.IDENTITY_CA_REVOKED, ids=[ca.id])
    return ca


def ca_set_auto_registration(ca: CaCertificate, enabled: bool) -> CaCertificate:
    """Just-in-time registration on or off: a certificate the CA signed for a device not yet
    known makes that device on its first connection (read by the broker at each CONNECT)."""
    if ca.auto_registration != enabled:
        ca.auto_registration = enabled
        ca.save(update_fields=["auto_registration"])
    return ca


def cas_list(*, tenant: Tenant) -> QuerySet[CaCertificate]:
    return CaCertificate.objects.filter(tenant=tenant)


def ca_get(*, tenant: Tenant, name: str) -> CaCertificate:
    ca = CaCertificate.objects.filter(tenant=tenant, name=name).first()
    if ca is None:
        raise Http404("No such CA.")
    return ca


# -- device certificates (by fingerprint) -------------------------------------------------------


@transaction.atomic
def device_certificate_register(*, device: Device, pem: str) -> DeviceCertificate:
    require_active(device.tenant)
    try:
        parsed = parse_device_certificate(pem)
    except IdentityError as exc:
        raise _invalid("pem", exc) from None
    certificate = DeviceCertificate(
        tenant=device.tenant,
        device=device,
        pem=pem.strip() + "\n",
        fingerprint=parsed.fingerprint,
        subject=parsed.subject[:512],
        not_after=parsed.not_after,
    )
    try:
        with transaction.atomic():
            certificate.save()
    except IntegrityError:
        raise ValidationError({"pem": ["This certificate is already registered."]}) from None
    announce(
        device.tenant.slug, ChangeKind.IDENTITY_CERT_ADDED, device=device.name, ids=[certificate.id]
    )
    return certificate


@transaction.atomic
def device_certificate_revoke(certificate: DeviceCertificate) -> DeviceCertificate:
    if certificate.revoked_at is None:
        certificate.revoked_at = timezone.now()
        certificate.save(update_fields=["revoked_at"])
        announce(
            certificate.tenant.slug,
            ChangeKind.IDENTITY_CERT_REVOKED,
            device=certificate.device.name,
            ids=[certificate.id],
        )
    return certificate


def device_certificates_list(*, device: Device) -> QuerySet[DeviceCertificate]:
    return DeviceCertificate.objects.filter(device=device)


def device_certificate_get(*, device: Device, certificate_id: int) -> DeviceCertificate:
    certificate = DeviceCertificate.objects.filter(device=device, id=certificate_id).first()
    if certificate is None:
        raise Http404("No such certificate.")
    return certificate


# -- JWT keys -----------------------------------------------------------------------------------


@transaction.atomic
def jwt_keys_add(*, tenant: Tenant, key: str, kid: str = "", algorithm: str = "") -> list[JwtKey]:
    """One PEM public key (named `kid`) or every key of a JWKS document."""
    require_active(tenant)
    try:
        parsed = parse_public_keys(key, kid=kid, algorithm=algorithm)
    except IdentityError as exc:
        raise _invalid("key", exc) from None
    created = []
    for public in parsed:
        row = JwtKey(
            tenant=tenant, kid=public.kid, algorithm=public.algorithm, public_key=public.pem
        )
        try:
            row.full_clean(exclude=["tenant"], validate_unique=False, validate_constraints=False)
        except ValidationError as exc:
            raise ValidationError({"kid": exc.message_dict.get("kid", [str(exc)])}) from None
        if JwtKey.objects.filter(tenant=tenant, kid=public.kid).exists():
            raise ValidationError({"kid": [f"A key with kid {public.kid!r} already exists."]})
        row.save()
        created.append(row)
    announce(tenant.slug, ChangeKind.IDENTITY_JWT_KEY_ADDED, ids=[row.id for row in created])
    return created


@transaction.atomic
def jwt_key_revoke(key: JwtKey) -> JwtKey:
    if key.revoked_at is None:
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        announce(key.tenant.slug, ChangeKind.IDENTITY_JWT_KEY_REVOKED, ids=[key.id])
    return key


def jwt_keys_list(*, tenant: Tenant) -> QuerySet[JwtKey]:
    return JwtKey.objects.filter(tenant=tenant)


def jwt_key_get(*, tenant: Tenant, kid: str) -> JwtKey:
    key = JwtKey.objects.filter(tenant=tenant, kid=kid).first()
    if key is None:
        raise Http404("No such key.")
    return key

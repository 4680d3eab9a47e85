"""Device identity beyond secrets, on the control plane: a tenant's CA certificates, devices'
own certificates (by fingerprint) and JWT public keys. Writes (services) and reads (selectors) of
one small domain; each write announces `identity.*` so the broker adds a TLS anchor or ends the
connections a revoked one admitted (`data_plane.tenancy.control`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from common.contracts.notifications import ChangeKind
from common.security.device_credentials import (
    IdentityError,
    ParsedCertificate,
    issued_by,
    parse_ca,
    parse_certificate,
    parse_device_certificate,
    parse_public_keys,
)
from tenants.devices import services as device_services
from tenants.models import CaCertificate, Device, DeviceCertificate, JwtKey, Tenant
from tenants.notify import announce
from tenants.suspension import require_active
from tenants.tenant.stored_limits import require_certificate_room


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


# CA registrations (attempts, refused ones included) per tenant, as `tenants.accounts.throttles`
# counts: each costs a signature check here, and each registered CA a place the broker may look
# at a failing CONNECT. Overridden by the `CA_REGISTRATION_RATE` setting.
CA_REGISTRATION_RATE_DEFAULT = "10/min"


class RegistrationThrottled(Exception):
    """The tenant registered CAs too often; `wait` seconds until it may again (a 429)."""

    def __init__(self, wait: float, rate: str) -> None:
        self.wait = wait
        count, _, period = rate.partition("/")
        super().__init__(
            f"CA certificates were registered too often (at most {count} a {period.strip()} "
            f"per tenant); try again in {max(1, round(wait))} s."
        )


def ca_registration_rate() -> str:
    from django.conf import settings

    return getattr(settings, "CA_REGISTRATION_RATE", None) or CA_REGISTRATION_RATE_DEFAULT


def cas_counted(tenant: Tenant) -> QuerySet[CaCertificate]:
    """The tenant's CAs that count against `max_ca_certificates`: the live ones it registered
    (revoked ones and the platform's fleet CA aside)."""
    from tenants.models import FleetAuthority

    fleet = FleetAuthority.objects.filter(tenant=tenant).values("ca_id")
    return CaCertificate.objects.filter(tenant=tenant, revoked_at=None).exclude(id__in=fleet)


def ca_register(
    *, tenant: Tenant, name: str, pem: str, verification_pem: str, auto_registration: bool = False
) -> CaCertificate:
    """AWS IoT's "register CA": device certificates it issues name their device in the CN.
    `verification_pem`: a certificate the CA signed whose CN is `registration_code(tenant)`.

    At most `CA_REGISTRATION_RATE` attempts per tenant (`RegistrationThrottled`) and
    `max_ca_certificates` live CAs (`QuotaExceeded`); both refusals are counted
    (`tenants.quota_refusals`)."""
    from tenants.accounts.throttles import hit
    from tenants.quota_refusals import QuotaExceeded, count_refusal

    require_active(tenant)
    rate = ca_registration_rate()
    wait = hit("ca-registration", str(tenant.id), rate)
    if wait:
        count_refusal(tenant, "ca_registration_rate")
        raise RegistrationThrottled(wait, rate)
    try:
        return _ca_register(
            tenant=tenant,
            name=name,
            pem=pem,
            verification_pem=verification_pem,
            auto_registration=auto_registration,
        )
    except QuotaExceeded:
        count_refusal(tenant, "ca_certificates")  # after the rollback: the count stays
        raise


@transaction.atomic
def _ca_register(
    *, tenant: Tenant, name: str, pem: str, verification_pem: str, auto_registration: bool
) -> CaCertificate:
    from tenants.quota_refusals import QuotaExceeded
    from tenants.tenant.selectors import effective_quota

    try:
        parsed = parse_ca(pem)
    except IdentityError as exc:
        raise _invalid("pem", exc) from None
    _check_possession(tenant, parsed, verification_pem)
    require_certificate_room(tenant)
    # One tenant's registrations in turn: the count below cannot be raced past the limit.
    Tenant.objects.select_for_update().filter(id=tenant.id).first()
    most = effective_quota(tenant)["max_ca_certificates"]
    if cas_counted(tenant).count() >= most:
        raise QuotaExceeded(
            "pem",
            f"Your plan ({tenant.plan.name}) allows {most} registered CA "
            f"certificate{'s' if most != 1 else ''} (max_ca_certificates): revoke one you no "
            "longer use first, or move to a larger plan.",
            quota="max_ca_certificates",
            limit=most,
        )
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
    require_certificate_room(device.tenant)
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


# -- all of a tenant's device certificates, and importing many at once (issue 41) -------------

MAX_IMPORT = 100  # certificates per import call: about 1.6 MB of PEM at most, one request
CERTIFICATE_STATUSES = ("active", "revoked", "expired")


def certificates_list(
    *, tenant: Tenant, status: str | None = None, device: str | None = None
) -> QuerySet[DeviceCertificate]:
    """Every device certificate of the tenant (newest first), optionally of one status
    (`CERTIFICATE_STATUSES`, as `certificate_status` says) or of one device."""
    rows = DeviceCertificate.objects.filter(tenant=tenant).select_related("device")
    now = timezone.now()
    if status == "revoked":
        rows = rows.exclude(revoked_at=None)
    elif status == "expired":
        rows = rows.filter(revoked_at=None, not_after__lte=now)
    elif status == "active":
        rows = rows.filter(revoked_at=None, not_after__gt=now)
    if device:
        rows = rows.filter(device__name=device)
    return rows.order_by("-created_at", "-id")  # the id: pages do not shift on equal times


def certificate_status(certificate: DeviceCertificate, now: datetime | None = None) -> str:
    """revoked (by the tenant; whatever its dates), expired (past notAfter), else active."""
    if certificate.revoked_at is not None:
        return "revoked"
    return "expired" if certificate.not_after <= (now or timezone.now()) else "active"


def certificate_issuer(certificate: DeviceCertificate) -> str:
    """The issuer's name (RFC 4514), read from the stored PEM (it was readable when registered;
    the table keeps no column for it, and a page holds at most a few hundred rows)."""
    try:
        return parse_certificate(certificate.pem).issuer
    except IdentityError:
        return ""


def certificate_get(*, tenant: Tenant, certificate_id: int) -> DeviceCertificate:
    """One of the tenant's device certificates; another tenant's is a 404 like a missing one."""
    certificate = (
        DeviceCertificate.objects.filter(tenant=tenant, id=certificate_id)
        .select_related("device")
        .first()
    )
    if certificate is None:
        raise Http404("No such certificate.")
    return certificate


@dataclass
class ImportResult:
    """What became of one certificate of an import: `registered` (now registered),
    `exists` (already registered for that device: nothing changed) or `error` (with why)."""

    index: int
    device: str | None
    fingerprint: str | None
    status: str
    error: str | None = None
    device_created: bool = False
    certificate_id: int | None = None


def _words(error: ValidationError) -> str:
    """A refusal of the services as one sentence (their field names are ours, not the caller's:
    `name` is the device's name here)."""
    if not hasattr(error, "message_dict"):
        return " ".join(error.messages)
    labels = {"name": "device name", "pem": ""}
    parts = []
    for field, messages in error.message_dict.items():
        label = labels.get(field, field)
        parts.extend(f"{label}: {m}" if label else m for m in messages)
    return " ".join(parts)


def device_certificates_import(
    *,
    tenant: Tenant,
    certificates: list[dict[str, str]],
    ca: str = "",
    create_devices: bool = False,
) -> list[ImportResult]:
    """Register many device certificates at once (AWS's `register-certificate`, in bulk): each
    item is `{pem, device?}`; without `device` the certificate's subject CN names it. Each
    certificate is registered in a transaction of its own, so one that is refused (unreadable,
    expired, a CA's, of a device that does not exist) leaves the others registered; the answer
    says, in order, what became of each.

    `ca`: the name of a CA the tenant registered: every certificate must be one it signed, and
    its CN is its device (as the broker reads it). `create_devices`: a device that does not
    exist yet is made (AWS's `create-thing` beside the registration; its secret is never shown,
    the certificate is how it connects); without it such a certificate is refused."""
    require_active(tenant)
    if len(certificates) > MAX_IMPORT:
        raise ValidationError(
            {
                "certificates": [
                    f"At most {MAX_IMPORT} certificates per call, got {len(certificates)}: "
                    "send the rest in further calls."
                ]
            }
        )
    authority = None
    if ca:
        row = CaCertificate.objects.filter(tenant=tenant, name=ca).first()
        if row is None:
            raise ValidationError({"ca": [f"No CA named {ca!r} is registered (GET /api/v1/cas)."]})
        if row.revoked_at is not None:
            raise ValidationError({"ca": [f"CA {ca!r} is revoked: what it signed is refused."]})
        authority = parse_certificate(row.pem)
    return [
        _import_one(
            tenant,
            index,
            item.get("pem") or "",
            item.get("device") or "",
            authority=authority,
            ca=ca,
            create_devices=create_devices,
        )
        for index, item in enumerate(certificates)
    ]


def _import_one(
    tenant: Tenant,
    index: int,
    pem: str,
    device: str,
    *,
    authority: ParsedCertificate | None,
    ca: str,
    create_devices: bool,
) -> ImportResult:
    def refused(why: str, name: str | None = None, fp: str | None = None) -> ImportResult:
        return ImportResult(index, name or device or None, fp, "error", why)

    if pem.count("-----BEGIN CERTIFICATE-----") > 1:
        return refused("one certificate per item: this one holds several (a chain?)")
    try:
        parsed = parse_device_certificate(pem)
    except IdentityError as exc:
        return refused(str(exc))
    fp, name = parsed.fingerprint, device or parsed.common_name
    if authority is not None:
        if not issued_by(parsed, authority):
            return refused(f"not signed by CA {ca!r}", name, fp)
        if device and device != parsed.common_name:
            return refused(
                f"a certificate of CA {ca!r} is the device its CN names "
                f"({parsed.common_name!r}), not {device!r}",
                name,
                fp,
            )
    if not name:
        return refused("the certificate's subject has no CN: name its device", fp=fp)
    existing = (
        DeviceCertificate.objects.filter(tenant=tenant, fingerprint=fp, revoked_at=None)
        .select_related("device")
        .first()
    )
    if existing is not None:
        if existing.device.name == name:
            return ImportResult(index, name, fp, "exists", certificate_id=existing.id)
        return refused(f"already registered for device {existing.device.name!r}", name, fp)
    created = False
    try:
        with transaction.atomic():  # the device it made goes if its certificate is refused
            target = Device.objects.filter(tenant=tenant, name=name).first()
            if target is None:
                if not create_devices:
                    raise ValidationError(
                        f"no device {name!r} in this tenant: create it first, or import with "
                        "create_devices"
                    )
                target, _ = device_services.device_create(tenant=tenant, name=name)
                created = True
            row = device_certificate_register(device=target, pem=pem)
    except ValidationError as exc:
        return refused(_words(exc), name, fp)
    return ImportResult(
        index, name, fp, "registered", device_created=created, certificate_id=row.id
    )


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

"""Fleet provisioning by claim on the control plane: a tenant's provisioning templates and their
claim certificates (AWS IoT's `CreateProvisioningTemplate`, `CreateProvisioningClaim`). Writes
(services) and reads (selectors) of one small domain; the broker serves the devices' side
(`data_plane.fleet`).

The certificates are issued by a CA the platform keeps for the tenant (`FleetAuthority`, made on
the first claim): it is registered as one of the tenant's CAs, so the TLS listeners let its
certificates through, and the broker knows each of them by fingerprint (`FleetCertificate`)."""

from __future__ import annotations

import string
from dataclasses import dataclass
from datetime import timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import QuerySet
from django.http import Http404
from django.utils import timezone

from common.contracts.notifications import ChangeKind
from common.fleet import pki as fleet_pki
from common.security.sealed import seal
from tenants.models import (
    DEVICE_NAME_VALIDATOR,
    AclRule,
    CaCertificate,
    DeviceGroup,
    FleetAuthority,
    FleetCertificate,
    ProvisioningTemplate,
    Tenant,
)
from tenants.notify import announce
from tenants.suspension import require_active
from tenants.tenant.stored_limits import require_certificate_room

AUTHORITY_CA_NAME = "fleet-provisioning"  # the fleet CA's name among the tenant's CAs


def template_parameters(device_name_template: str) -> list[str]:
    """The parameters a template's device name takes (`sensor-{SerialNumber}`: SerialNumber);
    ValidationError where the template is not one (plain `{Name}` fields only: no format
    specification or conversion)."""
    problem = ["Name at least one parameter, e.g. sensor-{SerialNumber} (letters, digits, _)."]
    try:
        parts = list(string.Formatter().parse(device_name_template))
    except ValueError as exc:
        raise ValidationError({"device_name_template": [str(exc)]}) from None
    fields = [field for _text, field, _spec, _conv in parts if field is not None]
    plain = all(not spec and not conv for _text, field, spec, conv in parts if field is not None)
    if not fields or not plain or any(not field.isidentifier() for field in fields):
        raise ValidationError({"device_name_template": problem})
    sample = device_name_template.format(**{field: "x" for field in fields})
    try:
        DEVICE_NAME_VALIDATOR(sample)
    except ValidationError:
        raise ValidationError(
            {"device_name_template": ["With its parameters filled in it must be a device name."]}
        ) from None
    return fields


def _check_acl_rules(rules: list[dict]) -> list[dict]:
    actions, permissions = set(AclRule.Action.values), set(AclRule.Permission.values)
    if not isinstance(rules, list):
        raise ValidationError({"acl_rules": ["A list of rules: [{action, permission, topic}]."]})
    clean = []
    for index, rule in enumerate(rules):
        if (
            not isinstance(rule, dict)
            or rule.get("action") not in actions
            or rule.get("permission") not in permissions
            or not isinstance(rule.get("topic"), str)
            or not 0 < len(rule["topic"]) <= 512
        ):
            raise ValidationError(
                {
                    "acl_rules": [
                        f"Rule {index}: give action ({', '.join(sorted(actions))}), permission "
                        "(allow, deny) and topic."
                    ]
                }
            )
        clean.append({key: rule[key] for key in ("action", "permission", "topic")})
    return clean


def _groups(tenant: Tenant, names) -> list[DeviceGroup]:
    """The tenant's groups of these names, or 400 naming those it has none of (another
    tenant's group is one it has none of)."""
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValidationError({"groups": ["A list of device group names."]})
    wanted = list(dict.fromkeys(names))
    found = {g.name: g for g in DeviceGroup.objects.filter(tenant=tenant, name__in=wanted)}
    unknown = [n for n in wanted if n not in found]
    if unknown:
        raise ValidationError({"groups": [f"Unknown groups: {', '.join(unknown)}."]})
    return [found[n] for n in wanted]


@transaction.atomic
def template_create(
    *,
    tenant: Tenant,
    name: str,
    device_name_template: str,
    acl_rules: list[dict] | None = None,
    attributes: dict | None = None,
    enabled: bool = True,
    pre_provisioning_hook_url: str = "",
    groups: list[str] | None = None,
) -> ProvisioningTemplate:
    require_active(tenant)
    template_parameters(device_name_template)
    if not isinstance(attributes, dict | None):
        raise ValidationError({"attributes": ["An object of the new device's attributes."]})
    members_of = _groups(tenant, [] if groups is None else groups)
    template = ProvisioningTemplate(
        tenant=tenant,
        name=name,
        device_name_template=device_name_template,
        acl_rules=_check_acl_rules([] if acl_rules is None else acl_rules),
        attributes=attributes or {},
        enabled=enabled,
        pre_provisioning_hook_url=pre_provisioning_hook_url,
    )
    try:
        template.full_clean(exclude=["tenant"], validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise ValidationError(exc.message_dict) from None
    if ProvisioningTemplate.objects.filter(tenant=tenant, name=name).exists():
        raise ValidationError({"name": [f"A provisioning template named {name!r} exists."]})
    template.save()
    template.groups.set(members_of)
    return template


_UPDATABLE = {
    "device_name_template",
    "acl_rules",
    "attributes",
    "enabled",
    "pre_provisioning_hook_url",
    "groups",
}


@transaction.atomic
def template_update(template: ProvisioningTemplate, **fields: object) -> ProvisioningTemplate:
    """Change what devices provisioned from now on become (its name stays: the devices' claims
    name it); those it already made keep what they got."""
    unknown = set(fields) - _UPDATABLE
    if unknown:
        raise ValidationError({name: ["Cannot be changed."] for name in sorted(unknown)})
    require_active(template.tenant)
    if "device_name_template" in fields:
        template_parameters(fields["device_name_template"])
        template.device_name_template = fields["device_name_template"]
    if "acl_rules" in fields:
        template.acl_rules = _check_acl_rules(fields["acl_rules"])
    if "attributes" in fields:
        if not isinstance(fields["attributes"], dict):
            raise ValidationError({"attributes": ["An object of the new device's attributes."]})
        template.attributes = fields["attributes"]
    for name in ("enabled", "pre_provisioning_hook_url"):
        if name in fields:
            setattr(template, name, fields[name])
    members_of = _groups(template.tenant, fields["groups"]) if "groups" in fields else None
    try:
        template.full_clean(exclude=["tenant"], validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise ValidationError(exc.message_dict) from None
    template.save()
    if members_of is not None:
        template.groups.set(members_of)
    return template


def templates_list(*, tenant: Tenant) -> QuerySet[ProvisioningTemplate]:
    return ProvisioningTemplate.objects.filter(tenant=tenant).prefetch_related("groups")


def template_group_names(template: ProvisioningTemplate) -> list[str]:
    """The names of the groups the template puts its devices in."""
    return [group.name for group in template.groups.all()]


def template_get(*, tenant: Tenant, name: str) -> ProvisioningTemplate:
    if "\x00" in name:  # no template has it (and NUL never reaches Postgres)
        raise Http404("No such provisioning template.")
    template = ProvisioningTemplate.objects.filter(tenant=tenant, name=name).first()
    if template is None:
        raise Http404("No such provisioning template.")
    return template


@transaction.atomic
def template_delete(template: ProvisioningTemplate) -> None:
    """Its claim certificates go with it (no device provisions with them any more); the devices
    it made keep their certificates."""
    FleetCertificate.objects.filter(template=template, kind=FleetCertificate.Kind.CLAIM).delete()
    template.delete()


def _authority(tenant: Tenant) -> FleetAuthority:
    """The tenant's fleet CA, made (and registered among its CAs) the first time, and again
    after the tenant revoked it."""
    existing = (
        FleetAuthority.objects.select_for_update()
        .select_related("ca")
        .filter(tenant=tenant)
        .first()
    )
    if existing is not None and existing.ca.revoked_at is None:
        return existing
    if existing is not None:  # the tenant revoked it: a new CA signs from now on
        existing.delete()
    cert, key = fleet_pki.new_authority(tenant.slug)
    name = AUTHORITY_CA_NAME
    if CaCertificate.objects.filter(tenant=tenant, name=name).exists():
        name = f"{AUTHORITY_CA_NAME}-{timezone.now():%Y%m%d%H%M%S}"
    ca = CaCertificate.objects.create(
        tenant=tenant,
        name=name,
        pem=fleet_pki.certificate_pem(cert),
        fingerprint=fleet_pki.certificate_id(cert),
        subject=cert.subject.rfc4514_string()[:512],
        not_after=cert.not_valid_after_utc,
    )
    authority = FleetAuthority.objects.create(
        tenant=tenant, ca=ca, key=seal(fleet_pki.key_pem(key))
    )
    transaction.on_commit(lambda: announce(tenant.slug, ChangeKind.IDENTITY_CA_ADDED, ids=[ca.id]))
    return authority


@dataclass(frozen=True)
class IssuedClaim:
    certificate: FleetCertificate
    private_key: str  # shown once, never stored
    ca_pem: str


@transaction.atomic
def claim_create(template: ProvisioningTemplate) -> IssuedClaim:
    """A claim certificate for `template`: whoever connects with it may provision devices with
    this template, and do nothing else."""
    from common.security.sealed import unseal

    tenant = template.tenant
    require_active(tenant)
    authority = _authority(tenant)
    require_certificate_room(tenant, field="claim")
    from cryptography import x509

    ca_cert = x509.load_pem_x509_certificate(authority.ca.pem.encode())
    cert, key = fleet_pki.issue_with_key(ca_cert, fleet_pki.load_key(unseal(authority.key)))
    certificate = FleetCertificate.objects.create(
        tenant=tenant,
        kind=FleetCertificate.Kind.CLAIM,
        certificate_id=fleet_pki.certificate_id(cert),
        template=template,
        pem=fleet_pki.certificate_pem(cert),
        not_after=cert.not_valid_after_utc,
    )
    return IssuedClaim(certificate, fleet_pki.key_pem(key), authority.ca.pem)


def claims_list(template: ProvisioningTemplate) -> QuerySet[FleetCertificate]:
    return FleetCertificate.objects.filter(template=template, kind=FleetCertificate.Kind.CLAIM)


def claim_get(template: ProvisioningTemplate, certificate_id: str) -> FleetCertificate:
    claim = None
    if "\x00" not in certificate_id:
        claim = claims_list(template).filter(certificate_id=certificate_id).first()
    if claim is None:
        raise Http404("No such claim certificate.")
    return claim


def claim_revoke(claim: FleetCertificate) -> FleetCertificate:
    """No device provisions with it from now on (the broker reads claims at each CONNECT and
    each request, uncached)."""
    if claim.revoked_at is None:
        claim.revoked_at = timezone.now()
        claim.save(update_fields=["revoked_at"])
    return claim


def unregistered_certificates_purge(*, older_than: timedelta = timedelta(days=1)) -> int:
    """Forget the certificates created over MQTT whose ownership token expired unused (a
    device that never registered, or a claim holder asking again and again): they could never
    connect, and would otherwise pile up. Returns how many went."""
    cutoff = timezone.now() - older_than
    gone, _ = FleetCertificate.objects.filter(
        kind=FleetCertificate.Kind.DEVICE, device=None, token_expires_at__lt=cutoff
    ).delete()
    return gone

"""Writes of a tenant's devices and their credentials (create, update, delete, rotate, revoke,
expire); each announces the change to the broker."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from common.access.client_id_pattern import PatternError
from common.access.client_id_pattern import validate as validate_client_id_pattern
from common.contracts.notifications import ChangeKind
from common.security import secrets
from tenants.models import (
    Credential,
    Device,
    Tenant,
)
from tenants.notify import announce
from tenants.suspension import require_active


def _validate_client_id_policy(policy: str, pattern: str) -> None:
    if policy not in Device.ClientIdPolicy.values:
        raise ValidationError(
            {"client_id_policy": [f"Must be one of {Device.ClientIdPolicy.values}."]}
        )
    if policy == Device.ClientIdPolicy.PATTERN:
        if not pattern:
            raise ValidationError({"client_id_pattern": ["A pattern policy needs a pattern."]})
        try:  # a glob, never a regex: it runs on the broker's loop at every CONNECT
            validate_client_id_pattern(pattern)
        except PatternError as exc:
            raise ValidationError(
                {"client_id_pattern": [f"Not a valid pattern: {exc} (use * and ?)."]}
            ) from None


@transaction.atomic
def device_create(
    *,
    tenant: Tenant,
    name: str,
    client_id_policy: str = Device.ClientIdPolicy.EXACT,
    client_id_pattern: str = "",
    attributes: dict | None = None,
    enabled: bool = True,
    password: str | None = None,
) -> tuple[Device, str]:
    """Create a device and its first credential; returns the secret, which is never stored."""
    require_active(tenant)
    _validate_client_id_policy(client_id_policy, client_id_pattern)
    device = Device(
        tenant=tenant,
        name=name,
        client_id_policy=client_id_policy,
        client_id_pattern=client_id_pattern,
        attributes=attributes or {},
        enabled=enabled,
    )
    try:
        device.full_clean(exclude=["tenant"], validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise ValidationError(exc.message_dict) from None
    if Device.objects.filter(tenant=tenant, name=name).exists():
        raise ValidationError({"name": [f"Device {name!r} already exists in {tenant.slug}."]})
    try:
        with transaction.atomic():
            device.save()
    except IntegrityError:
        raise ValidationError(
            {"name": [f"Device {name!r} already exists in {tenant.slug}."]}
        ) from None
    if password is not None and len(password) < 16:
        raise ValidationError({"password": ["A device secret needs at least 16 characters."]})
    secret = password or secrets.generate_secret()
    credential = Credential.objects.create(
        device=device,
        secret_hash=secrets.hash_secret(secret),
        scram_verifier=secrets.scram_verifier(secret),
    )
    announce(tenant.slug, ChangeKind.DEVICE_CREATED, device=device.name, ids=[device.id])
    announce(tenant.slug, ChangeKind.CREDENTIAL_CREATED, device=device.name, ids=[credential.id])
    return device, secret


@transaction.atomic
def device_update(device: Device, **fields: object) -> Device:
    allowed = {"enabled", "client_id_policy", "client_id_pattern", "attributes"}
    unknown = set(fields) - allowed
    if unknown:
        raise ValidationError({key: ["This field cannot be changed."] for key in unknown})
    was_enabled = device.enabled
    for key, value in fields.items():
        setattr(device, key, value)
    _validate_client_id_policy(device.client_id_policy, device.client_id_pattern)
    device.save()
    if device.enabled != was_enabled:
        kind = ChangeKind.DEVICE_ENABLED if device.enabled else ChangeKind.DEVICE_DISABLED
    else:
        kind = ChangeKind.DEVICE_UPDATED
    announce(device.tenant.slug, kind, device=device.name, ids=[device.id])
    return device


@transaction.atomic
def device_delete(device: Device) -> None:
    slug, name, device_id = device.tenant.slug, device.name, device.id
    device.delete()
    announce(slug, ChangeKind.DEVICE_DELETED, device=name, ids=[device_id])


DEFAULT_ROTATION_GRACE = timedelta(hours=24)


MAX_ROTATION_GRACE = timedelta(days=30)


@transaction.atomic
def credential_rotate(
    device: Device,
    *,
    expires_at: datetime | None = None,
    grace: timedelta | None = DEFAULT_ROTATION_GRACE,
) -> tuple[Credential, str]:
    """Issue a new secret (returned once) and retire the previous one after `grace`.

    A device holds at most two live secrets: the new one and, for the grace period, the newest
    previous one, so devices can be moved over without downtime. Older secrets, and the previous
    one too when `grace` is zero or None ("now"), are revoked at once. The broker refuses a
    secret past its expiry and drops the connections that authenticated with it then.
    """
    now = timezone.now()
    if expires_at is not None and expires_at <= now:
        raise ValidationError({"expires_at": ["Must be in the future."]})
    if grace is not None and (grace < timedelta(0) or grace > MAX_ROTATION_GRACE):
        raise ValidationError(
            {"grace_seconds": [f"Must be between 0 and {int(MAX_ROTATION_GRACE.total_seconds())}."]}
        )
    live = [
        c
        for c in Credential.objects.select_for_update()
        .filter(device=device, revoked_at=None)
        .order_by("-created_at", "-id")
        if c.expires_at is None or c.expires_at > now
    ]
    keep = live[0] if live and grace else None
    revoked = [c.id for c in live if c is not keep]
    Credential.objects.filter(id__in=revoked).update(revoked_at=now)
    if keep is not None:
        retire_at = now + grace
        if keep.expires_at is None or keep.expires_at > retire_at:
            keep.expires_at = retire_at
        keep.retired_at = now
        keep.save(update_fields=["expires_at", "retired_at"])
    parsed = secrets.parse_scram_verifier(keep.scram_verifier) if keep else None
    secret = secrets.generate_secret()
    credential = Credential.objects.create(
        device=device,
        secret_hash=secrets.hash_secret(secret),
        scram_verifier=secrets.scram_verifier(secret, *((parsed[3], parsed[0]) if parsed else ())),
        expires_at=expires_at,
    )
    announce(
        device.tenant.slug,
        ChangeKind.CREDENTIAL_ROTATED,
        device=device.name,
        ids=[credential.id, *revoked, *([keep.id] if keep else [])],
    )
    return credential, secret


@transaction.atomic
def credential_retire_now(credential: Credential) -> Credential:
    """End a retiring secret's grace period now (the portal asks first): a revocation."""
    return credential_revoke(credential)


@transaction.atomic
def credential_revoke(credential: Credential) -> Credential:
    if credential.revoked_at is None:
        credential.revoked_at = timezone.now()
        credential.save(update_fields=["revoked_at"])
        device = credential.device
        announce(
            device.tenant.slug,
            ChangeKind.CREDENTIAL_REVOKED,
            device=device.name,
            ids=[credential.id],
        )
    return credential


def credentials_expire() -> int:
    """Mark credentials past their expiry as revoked and tell the broker; returns how many."""
    expired = 0
    now = timezone.now()
    due = Credential.objects.filter(revoked_at=None, expires_at__lte=now).select_related(
        "device__tenant"
    )
    for credential in due:
        with transaction.atomic():
            updated = Credential.objects.filter(id=credential.id, revoked_at=None).update(
                revoked_at=now
            )
            if updated:
                expired += 1
                device = credential.device
                announce(
                    device.tenant.slug,
                    ChangeKind.CREDENTIAL_EXPIRED,
                    device=device.name,
                    ids=[credential.id],
                )
    return expired

"""Reads of a tenant's devices, their presence and connections. Every function takes the
tenant it reads within: nothing here can reach another tenant's rows."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Exists, OuterRef, QuerySet
from django.http import Http404
from django.utils import timezone

from tenants.models import (
    CaCertificate,
    Credential,
    Device,
    DeviceConnection,
    DeviceGroup,
    Tenant,
)

# A broker refreshes its connections' heartbeat every 30 s (data_plane.tenancy.presence): a row
# older than this belongs to a broker that is gone.
PRESENCE_STALE_AFTER = timedelta(seconds=90)


def live_connections(*, tenant: Tenant) -> QuerySet[DeviceConnection]:
    return DeviceConnection.objects.filter(
        tenant=tenant, heartbeat_at__gt=timezone.now() - PRESENCE_STALE_AFTER
    )


def _with_presence(devices: QuerySet[Device], tenant: Tenant) -> QuerySet[Device]:
    """Each device annotated with `connected`: a live connection at a live broker."""
    return devices.annotate(
        connected=Exists(live_connections(tenant=tenant).filter(device=OuterRef("pk")))
    )


def devices_list(*, tenant: Tenant, name: str | None = None) -> QuerySet[Device]:
    devices = Device.objects.filter(tenant=tenant).select_related("tenant")
    if name:
        devices = devices.filter(name__icontains=name)
    return _with_presence(devices, tenant)


def device_get(*, tenant: Tenant, name: str) -> Device:
    """The tenant's device by name; Http404 otherwise (another tenant's device included)."""
    device = (
        _with_presence(Device.objects.filter(tenant=tenant, name=name), tenant)
        .select_related("tenant")
        .first()
    )
    if device is None:
        raise Http404(f"No device named {name!r}.")
    return device


def device_connections(*, device: Device) -> QuerySet[DeviceConnection]:
    """The device's live connections (several when its client-id policy allows it)."""
    return live_connections(tenant=device.tenant).filter(device=device)


def credential_get(
    *, device: Device, credential_id: int, unrevoked: bool = False
) -> Credential | None:
    """One of the device's credentials (None for another device's, or a revoked one when
    `unrevoked`)."""
    credentials = Credential.objects.filter(device=device, id=credential_id)
    if unrevoked:
        credentials = credentials.filter(revoked_at=None)
    return credentials.first()


def credentials_unrevoked(*, device: Device, besides: Credential) -> list[Credential]:
    """The device's other credentials still in use (live, or retiring after a rotation)."""
    return [c for c in device.credentials.exclude(id=besides.id) if c.state != "revoked"]


def device_names(*, tenant: Tenant, outside_group: DeviceGroup | None = None) -> list[str]:
    """The tenant's device names (those not in `outside_group`, when given)."""
    devices = devices_list(tenant=tenant)
    if outside_group is not None:
        devices = devices.exclude(groups=outside_group)
    return list(devices.values_list("name", flat=True))


def device_count(*, tenant: Tenant) -> int:
    return devices_list(tenant=tenant).count()


def ca_registered(*, tenant: Tenant, pem: str) -> bool:
    """Whether the tenant has this CA certificate registered and not revoked."""
    return CaCertificate.objects.filter(tenant=tenant, pem=pem, revoked_at=None).exists()


def ca_name_free(*, tenant: Tenant, name: str) -> str:
    """`name`, or `name-N` (N: the tenant's CAs so far) when the tenant has a CA of that name."""
    if CaCertificate.objects.filter(tenant=tenant, name=name).exists():
        return f"{name}-{CaCertificate.objects.filter(tenant=tenant).count()}"
    return name


def credentials_list(*, device: Device) -> QuerySet[Credential]:
    """The device's credentials, in the order the model keeps them."""
    return device.credentials.all()

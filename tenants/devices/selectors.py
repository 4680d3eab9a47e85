"""Reads of a tenant's devices, their presence and connections. Every function takes the
tenant it reads within: nothing here can reach another tenant's rows."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import Exists, OuterRef, QuerySet
from django.http import Http404
from django.utils import timezone

from tenants.models import (
    Device,
    DeviceConnection,
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

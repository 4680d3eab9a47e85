"""Reads of device shadows (`tenants.models.Shadow`), scoped to a tenant through its device."""

from __future__ import annotations

import time

from django.db.models import QuerySet
from django.http import Http404

from common.shadow import document as doc
from tenants.models import Device, Shadow, ShadowVersion, Tenant


def device_get(*, tenant: Tenant, name: str) -> Device:
    device = Device.objects.filter(tenant=tenant, name=name).first()
    if device is None:
        raise Http404("No such device.")
    return device


def shadow_of(row: Shadow | None) -> doc.Shadow:
    """The stored shadow as `common.shadow.document` works on it (absent: never created)."""
    if row is None:
        return doc.Shadow()
    return doc.Shadow(row.version, row.state or {}, row.metadata or {}, row.present)


def shadow_row(*, device: Device, name: str) -> Shadow | None:
    """The device's stored shadow `name` (None: never made)."""
    return Shadow.objects.filter(device=device, name=name).first()


def shadow_document(*, device: Device, name: str) -> tuple[dict, int]:
    """AWS's GetThingShadow answer (state with its delta, metadata, version) and the version, or
    Http404 when the shadow does not exist (never made, or deleted)."""
    row = Shadow.objects.filter(device=device, name=name).first()
    if row is None or not row.present:
        raise Http404(doc.not_found(device.name, name).message)
    return doc.get_document(shadow_of(row), int(time.time())), row.version


def shadow_names(*, device: Device) -> QuerySet[Shadow]:
    """The device's named shadows that exist (AWS's ListNamedShadowsForThing)."""
    return Shadow.objects.filter(device=device, present=True).exclude(name="").order_by("name")


def shadow_history(*, device: Device, name: str) -> QuerySet[ShadowVersion]:
    """The shadow's kept versions, newest first (empty when it never existed)."""
    return ShadowVersion.objects.filter(shadow__device=device, shadow__name=name).order_by("-id")

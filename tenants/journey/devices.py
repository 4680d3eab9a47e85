"""Reads: which of the tenant's devices a client id of the journey is, and which client ids a
device's timeline covers.

The journey records client ids, not devices. A device connects with its own name as client id
unless its policy allows others (`Device.client_id_policy`: `any`, or a glob `pattern`); its
live connections say which ids it uses now. Every read is scoped to one tenant.
"""

from __future__ import annotations

from collections.abc import Iterable

from common.access.client_id_pattern import matches as client_id_matches
from tenants.devices.selectors import device_connections, live_connections
from tenants.models import Device, Tenant


def device_may_use(device: Device, client_id: str) -> bool:
    """Whether the broker would let `device` connect as `client_id` (its policy's rule;
    `data_plane.tenancy.directory`): the client ids whose timeline its page may show."""
    if not client_id or client_id.startswith("$"):  # `$` ids belong to the platform's services
        return False
    if device.client_id_policy == Device.ClientIdPolicy.EXACT:
        return client_id == device.name
    if device.client_id_policy == Device.ClientIdPolicy.PATTERN:
        return client_id == device.name or client_id_matches(device.client_id_pattern, client_id)
    return True


def device_client_ids(device: Device) -> list[str]:
    """The client ids to offer on the device's page: those it is connected with now, then its
    name (what it connects as by default)."""
    ids = list(dict.fromkeys(device_connections(device=device).values_list("client_id", flat=True)))
    return ids if device.name in ids else [*ids, device.name]


def devices_for_clients(*, tenant: Tenant, client_ids: Iterable[str]) -> dict[str, str]:
    """client id -> the name of the tenant's device it is: the device connected with it now,
    else the device of that name, else the first whose pattern allows it; ids of no device
    (the platform's `$` services, a device since deleted) are left out."""
    wanted = {c for c in client_ids if c and not c.startswith("$")}
    if not wanted:
        return {}
    found = dict(
        live_connections(tenant=tenant)
        .filter(client_id__in=wanted)
        .values_list("client_id", "device__name")
    )
    rest = wanted - found.keys()
    for name in Device.objects.filter(tenant=tenant, name__in=rest).values_list("name", flat=True):
        found[name] = name
    rest -= found.keys()
    if rest:
        patterns = Device.objects.filter(
            tenant=tenant, client_id_policy=Device.ClientIdPolicy.PATTERN
        ).values_list("name", "client_id_pattern")
        for name, pattern in patterns.order_by("name"):
            for client_id in [c for c in rest if client_id_matches(pattern, c)]:
                found[client_id] = name
                rest.discard(client_id)
    return found

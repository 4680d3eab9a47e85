"""The device page's shadow editor: the shadow's desired, reported and delta side by side, its
named shadows, its history; members who may write rewrite the desired state (as a whole: the
editor sends the update that turns the old into the new, conditional on the version shown, so
a change made meanwhile is not overwritten) or delete the shadow. The same services as the REST
API, so devices are told on MQTT as for any other change."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from common.shadow import document as doc
from common.shadow.topics import SHADOW_NAME
from tenants.models import Device
from tenants.portal.views import tenant_view
from tenants.shadows import selectors as shadow_selectors
from tenants.shadows import services as shadow_services


def _back(device: Device, name: str):
    url = reverse("portal:device", args=[device.name])
    return redirect(f"{url}?shadow={name}#shadow" if name else f"{url}#shadow")


@require_POST
@tenant_view(write=True)
def device_shadow(request, membership, name: str):
    """Save the desired state, or delete the shadow (`action=delete`)."""
    device = shadow_selectors.device_get(tenant=membership.tenant, name=name)
    shadow = request.POST.get("shadow", "")
    if shadow and not SHADOW_NAME.match(shadow):
        raise Http404("No such shadow.")
    try:
        version = int(request.POST.get("version", ""))
    except ValueError:
        version = None
    actor = f"portal:{request.user.email}"
    try:
        if request.POST.get("action") == "delete":
            change = shadow_services.shadow_delete(
                device=device, name=shadow, if_match=version, actor=actor
            )
            messages.success(request, f"Shadow deleted (it was at version {change.version}).")
            return _back(device, shadow)
        try:
            wanted = json.loads(request.POST.get("desired") or "{}")
        except ValueError as exc:
            messages.error(request, f"The desired state is not JSON: {exc}.")
            return _back(device, shadow)
        if not isinstance(wanted, dict):
            messages.error(request, "The desired state must be a JSON object.")
            return _back(device, shadow)
        row = shadow_selectors.shadow_row(device=device, name=shadow)
        current = (row.state or {}).get("desired") if row is not None and row.present else None
        patch = shadow_services.replacement(current, wanted)
        body = {"state": {"desired": patch if wanted else None}}
        change = shadow_services.shadow_update(
            device=device,
            name=shadow,
            payload=json.dumps(body).encode(),
            if_match=version,
            actor=actor,
        )
        messages.success(request, f"Desired state saved: version {change.version}.")
    except shadow_services.PreconditionFailed as error:
        messages.error(
            request,
            f"The shadow changed since this page showed it ({error}): nothing was saved. "
            "Look at it again and redo your change.",
        )
    except doc.ShadowError as error:
        messages.error(request, f"Refused: {error.message} ({error.code}).")
    return _back(device, shadow)

"""What the device page shows of a device's shadow (`portal/_shadow.html`): desired, reported
and delta as JSON, the version the editor's change is conditional on, the named shadows, and the
latest versions of its history."""

from __future__ import annotations

import json

from django.http import Http404

from common.shadow import document as doc
from common.shadow.topics import SHADOW_NAME
from tenants.models import Device
from tenants.shadows import selectors as shadow_selectors

HISTORY_SHOWN = 20


def _pretty(value) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def editor_context(device: Device, name: str) -> dict:
    """What `portal/_shadow.html` shows of the device's shadow `name`."""
    if name and not SHADOW_NAME.match(name):
        raise Http404("No such shadow.")
    row = shadow_selectors.shadow_row(device=device, name=name)
    shadow = shadow_selectors.shadow_of(row)
    state = shadow.state if shadow.present else {}
    history = [
        {
            "version": v.version,
            "operation": v.operation,
            "via": v.via,
            "actor": v.actor,
            "created_at": v.created_at,
            "request": json.dumps(v.request, sort_keys=True) if v.request is not None else "",
        }
        for v in shadow_selectors.shadow_history(device=device, name=name)[:HISTORY_SHOWN]
    ]
    return {
        "shadow_name": name,
        "shadow_names": [s.name for s in shadow_selectors.shadow_names(device=device)],
        "shadow_present": shadow.present,
        "shadow_version": shadow.version,
        "shadow_desired": _pretty(state.get("desired", {})),
        "shadow_reported": _pretty(state.get("reported", {})),
        "shadow_delta": _pretty(doc.delta(state)) if doc.delta(state) else "",
        "shadow_history": history,
    }

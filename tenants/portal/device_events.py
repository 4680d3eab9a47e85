"""A device's events on its page: the life of one of its client ids (connected, refused,
subscribed, disconnected with the reason and who ended it, …) newest first, over what the plan
keeps of the journey; the reason codes with their meaning. `?client=` picks another client id
the device may use, `?events_cursor=` pages to older events."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any
from urllib.parse import urlencode

from django.http import HttpRequest
from django.utils import timezone

from tenants.devices.disconnect_reasons import describe
from tenants.journey.devices import device_client_ids, device_may_use
from tenants.journey.display import event_row, plan_allows, retention_text
from tenants.journey.links import journey_url
from tenants.journey.selectors import MAX_WINDOW, JourneyQueryError, JourneyReader
from tenants.models import Device
from tenants.tenant import selectors as tenant_selectors

PAGE_EVENTS = 50
log = logging.getLogger(__name__)


def _query(client_id: str, cursor: str | None = None) -> str:
    params = {"client": client_id, **({"events_cursor": cursor} if cursor else {})}
    return urlencode(params)


def device_events(request: HttpRequest, device: Device) -> dict[str, Any]:
    """The device page's `events` context and what the plan allows behind its last disconnect."""
    tenant = device.tenant
    limits = tenant_selectors.effective_quota(tenant)
    known = device_client_ids(device)
    chosen = request.GET.get("client", "").strip() or known[0]
    cursor = request.GET.get("events_cursor", "").strip() or None
    last = describe(device.last_disconnect_reason)
    events: dict[str, Any] = {
        "client_id": chosen,
        "client_ids": known if chosen in known else [*known, chosen],
        "other_ids_allowed": device.client_id_policy != Device.ClientIdPolicy.EXACT,
        "rows": [],
        "error": "",
        "older_query": "",
        "messages_url": journey_url((), client=chosen),
        "kept": retention_text(tenant.plan.journey_retention_hours),
    }
    context = {
        "events": events,
        "last_disconnect_allows": plan_allows(last.code, limits) if last else "",
    }
    if "\x00" in chosen or len(chosen) > 256 or not device_may_use(device, chosen):
        allowed = {
            Device.ClientIdPolicy.EXACT: f"only {device.name!r}",
            Device.ClientIdPolicy.PATTERN: f"client ids matching {device.client_id_pattern!r}",
        }.get(device.client_id_policy, "any client id but those starting with $")
        events["error"] = (
            f"Device {device.name} cannot connect as client id {chosen[:64]!r}: it may use "
            f"{allowed}."
        )
        return context
    end = timezone.now()
    start = end - min(timedelta(hours=tenant.plan.journey_retention_hours), MAX_WINDOW)
    try:
        page = JourneyReader().client_events(
            tenant.slug, chosen, start=start, end=end, limit=PAGE_EVENTS, cursor=cursor
        )
    except JourneyQueryError as exc:
        events["error"] = str(exc)
        return context
    except Exception:  # the object store away or a file unreadable: the page works without it
        log.exception("device events not read (tenant %s, client id %r)", tenant.slug, chosen)
        events["error"] = "The events could not be read just now; try again in a moment."
        return context
    events["rows"] = [event_row(row, limits) for row in page.rows]
    events["older_query"] = _query(chosen, page.cursor) if page.cursor else ""
    events["newest_query"] = _query(chosen) if cursor else ""
    return context

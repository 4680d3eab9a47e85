"""Portal pages that speak MQTT from the browser: the client over the broker's WebSocket, the
short-lived identity it connects with, and live messages on a topic filter."""

from __future__ import annotations

from django.conf import settings
from django.http import JsonResponse
from django.shortcuts import render
from django.views.decorators.http import require_POST

from common.security import service_token
from tenants.devices import selectors as device_selectors
from tenants.journey.display import code_meanings
from tenants.portal.views import _context, tenant_view
from tenants.tenant import selectors as tenant_selectors


@tenant_view()
def client(request, membership):
    """An MQTT client in the browser over the broker's WebSocket (static/portal/client.js)."""
    return render(
        request,
        "portal/client.html",
        _context(
            membership,
            devices=device_selectors.devices_list(tenant=membership.tenant),
            ws_url=settings.MQTT_PUBLIC_WS_URL,
            reason_codes=code_meanings(tenant_selectors.effective_quota(membership.tenant)),
        ),
    )


@require_POST
@tenant_view()
def client_token(request, membership):
    """A short-lived identity for the browser client: the tenant console (`$console`) for a member
    who may write, the read-only `$viewer` otherwise. Either is one of the tenant's clients, not
    the platform's: metered, counted against its quotas and held to its ACL like a device."""
    device = service_token.CONSOLE_DEVICE if membership.can_write else service_token.VIEWER_DEVICE
    tenant = membership.tenant.slug
    client_id = service_token.new_client_id(device)
    token = service_token.sign(service_token.load_key(), tenant, client_id)
    return JsonResponse(
        {"username": f"{tenant}/{device}", "password": token, "client_id": client_id}
    )


@tenant_view()
def live(request, membership):
    """Messages on a topic filter as they pass through the broker (see `tenants.portal.live`)."""
    return render(request, "portal/live.html", _context(membership))

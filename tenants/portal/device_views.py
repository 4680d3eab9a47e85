"""Portal pages of devices: the first device's onboarding (copy-ready snippets, the broker's CA),
the device list, a device's page (connections, events, shadow, secrets), rotating and retiring
secrets, enabling, disabling and deleting. A device's shadow editor posts to `shadow_views`."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import redirect, render, resolve_url
from django.views.decorators.http import require_POST

from tenants.devices import disconnect_reasons
from tenants.devices import onboarding as onboarding_snippets
from tenants.devices import selectors as device_selectors
from tenants.devices import services as device_services
from tenants.portal.device_events import device_events
from tenants.portal.forms import DeviceForm
from tenants.portal.shadow_editor import editor_context
from tenants.portal.views import (
    _context,
    _form_errors,
    _pop_once,
    _show_once,
    _tls_context,
    tenant_view,
)


@login_required
def broker_ca(request):
    """The CA that signed the broker's TLS certificate (`MQTT_PUBLIC_CA_FILE`), which devices
    trust the broker with (AWS's AmazonRootCA1.pem): no secret, the same for every tenant. A 404
    where the broker's certificate comes from a public CA the devices already trust."""
    if not settings.MQTT_PUBLIC_CA_FILE:
        raise Http404("This broker's certificate is signed by a public CA.")
    try:
        with open(settings.MQTT_PUBLIC_CA_FILE, "rb") as pem:
            body = pem.read()
    except OSError:
        raise Http404("The broker's CA file cannot be read.") from None
    response = HttpResponse(body, content_type="application/x-pem-file")
    response["Content-Disposition"] = f'attachment; filename="{onboarding_snippets.BROKER_CA_FILE}"'
    return response


@tenant_view()
def onboarding(request, membership):
    """The first device: copy-ready snippets filled with the broker address and the device's
    identity; a device made here has its secret filled in, once."""
    tenant = membership.tenant
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        name = request.POST.get("name", "").strip()
        try:
            device, secret = device_services.device_create(tenant=tenant, name=name)
        except ValidationError as error:
            for problem in getattr(error, "message_dict", {"name": error.messages}).values():
                messages.error(request, "; ".join(problem))
            return redirect("portal:onboarding")
        _show_once(request, password=secret, device=device.name)
        return redirect(f"{resolve_url('portal:onboarding')}?device={device.name}")
    devices = list(device_selectors.devices_list(tenant=tenant))
    chosen = request.GET.get("device")
    device = None
    if chosen:
        device = device_selectors.device_get(tenant=tenant, name=chosen)  # another tenant's: 404
    elif devices:
        device = devices[0]
    once = _pop_once(request)
    secret = once.get("password") if once and device and once.get("device") == device.name else None
    context = {
        "devices": devices,
        "device": device,
        "secret": secret,
        "mqtt_host": settings.MQTT_PUBLIC_HOST,
        "mqtt_port": settings.MQTT_PUBLIC_PORT,
        "placeholder": onboarding_snippets.PLACEHOLDER_SECRET,
        "suggested_name": "my-first-device" if not devices else f"device-{len(devices) + 1}",
        **_tls_context(),
    }
    if device is not None:
        context["snippets"] = onboarding_snippets.snippets(
            host=settings.MQTT_PUBLIC_HOST,
            port=settings.MQTT_PUBLIC_PORT,
            username=device.username,
            client_id=device.name,
            password=secret or onboarding_snippets.PLACEHOLDER_SECRET,
            topic=onboarding_snippets.hello_topic(device.name),
            tls_port=settings.MQTT_PUBLIC_TLS_PORT,
        )
        context["aws_sdk_files"] = onboarding_snippets.aws_sdk_files(device.name)
    return render(request, "portal/onboarding.html", _context(membership, **context))


@tenant_view()
def devices(request, membership):
    name = request.GET.get("name", "")
    form = DeviceForm()
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        form = DeviceForm(request.POST)
        if form.is_valid():
            try:
                device, secret = device_services.device_create(
                    tenant=membership.tenant, **form.cleaned_data
                )
            except ValidationError as error:
                _form_errors(form, error)
            else:
                _show_once(request, password=secret)
                return redirect("portal:device", name=device.name)
    listed = device_selectors.devices_list(tenant=membership.tenant, name=name or None)
    return render(
        request, "portal/devices.html", _context(membership, devices=listed, form=form, name=name)
    )


@tenant_view()
def device_detail(request, membership, name: str):
    device = device_selectors.device_get(tenant=membership.tenant, name=name)
    shadow = editor_context(device, request.GET.get("shadow", ""))
    return render(
        request,
        "portal/device.html",
        _context(
            membership,
            device=device,
            last_disconnect=disconnect_reasons.describe(device.last_disconnect_reason),
            secret=_pop_once(request),
            credentials=device_selectors.credentials_list(device=device)[:20],
            connections=device_selectors.device_connections(device=device),
            grace_choices=GRACE_CHOICES,
            mqtt_host=settings.MQTT_PUBLIC_HOST,
            mqtt_port=settings.MQTT_PUBLIC_PORT,
            **device_events(request, device),
            **shadow,
        ),
    )


# Grace periods offered by the rotate form, in seconds ("now" asks for confirmation first).
GRACE_CHOICES = {"86400": "24 hours", "3600": "1 hour", "604800": "7 days", "0": "now"}


@require_POST
@tenant_view(write=True)
def device_rotate(request, membership, name: str):
    """Issue a new secret; the previous one keeps working for the chosen grace period. Retiring
    it now (grace 0) drops the devices that use it, so the portal asks first."""
    device = device_selectors.device_get(tenant=membership.tenant, name=name)
    grace = request.POST.get("grace", "86400")
    if grace not in GRACE_CHOICES:
        grace = "86400"
    if grace == "0" and request.POST.get("confirm") != "yes":
        return render(
            request,
            "portal/credential_confirm.html",
            _context(membership, device=device, action="rotate-now"),
        )
    _, secret = device_services.credential_rotate(device, grace=timedelta(seconds=int(grace)))
    _show_once(request, password=secret)
    if grace == "0":
        messages.success(request, "New secret issued; the previous one no longer works.")
    else:
        messages.success(
            request,
            f"New secret issued; the previous one keeps working for {GRACE_CHOICES[grace]}.",
        )
    return redirect("portal:device", name=device.name)


@tenant_view(write=True)
def credential_retire(request, membership, name: str, credential_id: int):
    """End a secret's life now, after a confirmation page (GET shows it, POST acts)."""
    device = device_selectors.device_get(tenant=membership.tenant, name=name)
    credential = device_selectors.credential_get(
        device=device, credential_id=credential_id, unrevoked=True
    )
    if credential is None:
        raise Http404("No such credential.")
    if request.method != "POST":
        return render(
            request,
            "portal/credential_confirm.html",
            _context(membership, device=device, credential=credential, action="retire"),
        )
    device_services.credential_retire_now(credential)
    messages.success(
        request, f"Secret #{credential.id} retired; devices using it were disconnected."
    )
    return redirect("portal:device", name=device.name)


@require_POST
@tenant_view(write=True)
def device_toggle(request, membership, name: str):
    device = device_selectors.device_get(tenant=membership.tenant, name=name)
    device_services.device_update(device, enabled=not device.enabled)
    messages.success(request, f"Device {'enabled' if device.enabled else 'disabled'}.")
    return redirect("portal:device", name=device.name)


@tenant_view()
def device_delete(request, membership, name: str):
    device = device_selectors.device_get(tenant=membership.tenant, name=name)
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        device_services.device_delete(device)
        messages.success(request, f"Device {name} deleted.")
        return redirect("portal:devices")
    return render(request, "portal/device_delete.html", _context(membership, device=device))

"""Portal pages: thin views over the services and selectors. Writes are POSTs (CSRF-checked);
viewers see everything and change nothing.

This module is what every page module builds on (`tenant_view`, `_context`, `_form_errors`, the
secret shown once, the broker's TLS words) and the dashboard. The pages live by sub-domain beside
it: `account_views`, `device_views`, `client_views`, `acl_views`, `rule_views`, `billing_views`,
`job_views`, … (`tenants/portal/urls.py` maps them)."""

from __future__ import annotations

from functools import wraps

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import HttpRequest
from django.shortcuts import redirect, render

from tenants.accounts import selectors as account_selectors
from tenants.devices import onboarding as onboarding_snippets
from tenants.devices import selectors as device_selectors
from tenants.models import Membership
from tenants.tenant import selectors as tenant_selectors
from tenants.usage.throttling import limit_activity
from tenants.usage.throttling_display import drops_summary

ONCE_KEY = "portal_secret_once"


def _membership(request: HttpRequest) -> Membership:
    membership = account_selectors.current_membership(request.user, request.session.get("tenant"))
    if membership is None:
        raise PermissionDenied("You are not a member of any tenant.")
    return membership


def tenant_view(write: bool = False):
    """Log-in required; passes the membership; POSTs need a role that can write."""

    def decorate(view):
        @login_required
        @wraps(view)
        def wrapper(request, *args, **kwargs):
            if request.user.is_staff and not account_selectors.is_member(request.user):
                # An operator without a tenant of its own (the admin's "View site"): the
                # operators' overview rather than a bare 403.
                return redirect("portal:operator")
            membership = _membership(request)
            if write and not membership.can_write:
                raise PermissionDenied("Your role can read but not change this tenant.")
            return view(request, membership, *args, **kwargs)

        return wrapper

    return decorate


def _form_errors(form, error: ValidationError) -> None:
    for field, problems in getattr(error, "message_dict", {"__all__": error.messages}).items():
        form.add_error(field if field in form.fields else None, problems)


def _show_once(request: HttpRequest, **secret: str) -> None:
    request.session[ONCE_KEY] = secret


def _pop_once(request: HttpRequest) -> dict | None:
    return request.session.pop(ONCE_KEY, None)


def _context(membership: Membership, **extra):
    return {
        "tenant": membership.tenant,
        "membership": membership,
        "can_write": membership.can_write,
        **extra,
    }


def _tls_context() -> dict:
    """What the portal says about the broker's TLS listener wherever it shows the address."""
    return {
        "mqtt_host": settings.MQTT_PUBLIC_HOST,
        "mqtt_tls_port": settings.MQTT_PUBLIC_TLS_PORT,
        "broker_ca_file": onboarding_snippets.BROKER_CA_FILE,
        "broker_ca_offered": bool(settings.MQTT_PUBLIC_CA_FILE),
    }


@tenant_view()
def dashboard(request, membership):
    tenant = membership.tenant
    day = limit_activity(tenant=tenant)["last_24h"]
    return render(
        request,
        "portal/dashboard.html",
        _context(
            membership,
            drops=drops_summary(day, tenant_selectors.effective_quota(tenant)),
            device_count=device_selectors.device_count(tenant=tenant),
            memberships=account_selectors.memberships_for_user(request.user),
            mqtt_host=settings.MQTT_PUBLIC_HOST,
            mqtt_port=settings.MQTT_PUBLIC_PORT,
            mqtt_ws_url=settings.MQTT_PUBLIC_WS_URL,
            mqtt_tls_port=settings.MQTT_PUBLIC_TLS_PORT,
        ),
    )

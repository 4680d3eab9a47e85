"""Portal pages: thin views over the services and selectors. Writes are POSTs (CSRF-checked);
viewers see everything and change nothing."""

from __future__ import annotations

import json
from functools import wraps

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import authenticate, login, logout
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render, resolve_url
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from tenants import selectors, services, throttles
from tenants.models import Membership
from tenants.portal.forms import (
    AclForm,
    DeviceForm,
    LoginForm,
    RuleForm,
    SignupForm,
    TokenForm,
)
from tenants.rule_actions import redact_secrets

ONCE_KEY = "portal_secret_once"


def _membership(request: HttpRequest) -> Membership:
    membership = selectors.current_membership(request.user, request.session.get("tenant"))
    if membership is None:
        raise PermissionDenied("You are not a member of any tenant.")
    return membership


def tenant_view(write: bool = False):
    """Log-in required; passes the membership; POSTs need a role that can write."""

    def decorate(view):
        @login_required
        @wraps(view)
        def wrapper(request, *args, **kwargs):
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


# -- accounts -------------------------------------------------------------------------------


def signup(request: HttpRequest) -> HttpResponse:
    form = SignupForm(request.POST or None)
    if request.method == "POST" and throttles.login_wait(request.META, None):
        form.is_valid()
        form.add_error(None, "Too many attempts: try again in a minute.")
        return render(request, "portal/signup.html", {"form": form}, status=429)
    if request.method == "POST" and form.is_valid():
        try:
            tenant, user, _ = services.signup(**form.cleaned_data)
        except ValidationError as error:
            _form_errors(form, error)
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            request.session["tenant"] = tenant.slug
            messages.success(request, f"Welcome! Tenant {tenant.slug} is ready.")
            return redirect("portal:dashboard")
    return render(request, "portal/signup.html", {"form": form})


def login_view(request: HttpRequest) -> HttpResponse:
    form = LoginForm(request.POST or None)
    if request.method == "POST":
        # The same throttle as the API's token endpoint: per address, per account.
        wait = throttles.login_wait(request.META, request.POST.get("email"))
        if wait:
            form.is_valid()
            form.add_error(None, f"Too many attempts: try again in {int(wait) + 1} s.")
            return render(request, "portal/login.html", {"form": form}, status=429)
    if request.method == "POST" and form.is_valid():
        email = form.cleaned_data["email"].strip().lower()
        user = authenticate(request, username=email, password=form.cleaned_data["password"])
        if user is None:
            form.add_error(None, "Wrong email or password.")
        else:
            login(request, user)
            return redirect(_safe_next(request))
    return render(request, "portal/login.html", {"form": form})


def _safe_next(request: HttpRequest) -> str:
    """`?next=` only when it stays on this site (no open redirect); else the dashboard."""
    target = request.GET.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return resolve_url("portal:dashboard")


@require_POST
def logout_view(request: HttpRequest) -> HttpResponse:
    logout(request)
    return redirect("portal:login")


@login_required
@require_POST
def switch_tenant(request: HttpRequest) -> HttpResponse:
    slug = request.POST.get("tenant", "")
    if selectors.memberships_for_user(request.user).filter(tenant__slug=slug).exists():
        request.session["tenant"] = slug
    return redirect("portal:dashboard")


# -- pages ----------------------------------------------------------------------------------


@tenant_view()
def dashboard(request, membership):
    tenant = membership.tenant
    return render(
        request,
        "portal/dashboard.html",
        _context(
            membership,
            device_count=selectors.devices_list(tenant=tenant).count(),
            memberships=selectors.memberships_for_user(request.user),
            mqtt_host=settings.MQTT_PUBLIC_HOST,
            mqtt_port=settings.MQTT_PUBLIC_PORT,
            mqtt_ws_url=settings.MQTT_PUBLIC_WS_URL,
        ),
    )


@tenant_view()
def live(request, membership):
    """Messages on a topic filter as they pass through the broker (see `tenants.portal.live`)."""
    return render(request, "portal/live.html", _context(membership))


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
                device, secret = services.device_create(
                    tenant=membership.tenant, **form.cleaned_data
                )
            except ValidationError as error:
                _form_errors(form, error)
            else:
                _show_once(request, password=secret)
                return redirect("portal:device", name=device.name)
    listed = selectors.devices_list(tenant=membership.tenant, name=name or None)
    return render(
        request, "portal/devices.html", _context(membership, devices=listed, form=form, name=name)
    )


@tenant_view()
def device_detail(request, membership, name: str):
    device = selectors.device_get(tenant=membership.tenant, name=name)
    return render(
        request,
        "portal/device.html",
        _context(
            membership,
            device=device,
            secret=_pop_once(request),
            credentials=device.credentials.all()[:20],
            mqtt_host=settings.MQTT_PUBLIC_HOST,
            mqtt_port=settings.MQTT_PUBLIC_PORT,
        ),
    )


@require_POST
@tenant_view(write=True)
def device_rotate(request, membership, name: str):
    device = selectors.device_get(tenant=membership.tenant, name=name)
    _, secret = services.credential_rotate(device)
    _show_once(request, password=secret)
    messages.success(request, "New secret issued; the previous one no longer works.")
    return redirect("portal:device", name=device.name)


@require_POST
@tenant_view(write=True)
def device_toggle(request, membership, name: str):
    device = selectors.device_get(tenant=membership.tenant, name=name)
    services.device_update(device, enabled=not device.enabled)
    messages.success(request, f"Device {'enabled' if device.enabled else 'disabled'}.")
    return redirect("portal:device", name=device.name)


@tenant_view()
def device_delete(request, membership, name: str):
    device = selectors.device_get(tenant=membership.tenant, name=name)
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        services.device_delete(device)
        messages.success(request, f"Device {name} deleted.")
        return redirect("portal:devices")
    return render(request, "portal/device_delete.html", _context(membership, device=device))


@tenant_view()
def acls(request, membership):
    tenant = membership.tenant
    names = list(selectors.devices_list(tenant=tenant).values_list("name", flat=True))
    form = AclForm(devices=names)
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        form = AclForm(request.POST, devices=names)
        if form.is_valid():
            data = dict(form.cleaned_data)
            device_name = data.pop("device")
            device = selectors.device_get(tenant=tenant, name=device_name) if device_name else None
            try:
                services.acl_add(tenant=tenant, device=device, **data)
            except ValidationError as error:
                _form_errors(form, error)
            else:
                messages.success(request, "ACL rule added.")
                return redirect("portal:acls")
    rules = selectors.acl_rules_list(tenant=tenant)
    return render(request, "portal/acls.html", _context(membership, rules=rules, form=form))


@require_POST
@tenant_view(write=True)
def acl_delete(request, membership, rule_id: int):
    services.acl_delete(selectors.acl_rule_get(tenant=membership.tenant, rule_id=rule_id))
    messages.success(request, "ACL rule deleted.")
    return redirect("portal:acls")


@tenant_view()
def quota(request, membership):
    tenant = membership.tenant
    limits = selectors.effective_quota(tenant)
    rows = [(key, value, key in (tenant.quota_overrides or {})) for key, value in limits.items()]
    from datetime import UTC, datetime

    from tenants.billing import price_book_for

    book = price_book_for(tenant.plan, datetime.now(UTC).strftime("%Y-%m"))
    prices = [
        (name, spec.get("included", 0), spec.get("per", 1), spec["tiers"])
        for name, spec in book.dimensions.items()
    ]
    return render(
        request,
        "portal/quota.html",
        _context(membership, rows=rows, plan=tenant.plan, book=book, prices=prices),
    )


@tenant_view()
def tokens(request, membership):
    form = TokenForm()
    created = None
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        form = TokenForm(request.POST)
        if form.is_valid():
            _, created = services.api_token_create(
                user=request.user, tenant=membership.tenant, name=form.cleaned_data["name"]
            )
            form = TokenForm()
    listed = selectors.api_tokens_list(tenant=membership.tenant, user=request.user)
    return render(
        request,
        "portal/tokens.html",
        _context(membership, tokens=listed, form=form, created=created),
    )


@require_POST
@tenant_view(write=True)
def token_delete(request, membership, token_id: int):
    token = (
        selectors.api_tokens_list(tenant=membership.tenant, user=request.user)
        .filter(id=token_id)
        .first()
    )
    if token is None:
        raise Http404("No such token.")
    services.api_token_delete(token)
    messages.success(request, "Token deleted.")
    return redirect("portal:tokens")


# -- rules ----------------------------------------------------------------------------------

# What the editor's sample message starts as (the dry run's own defaults, with a JSON payload).
SAMPLE_MESSAGE = {
    "topic": "sensors/kitchen/temp",
    "payload": '{"temp": 31.5, "hum": 40}',
    "qos": 1,
    "clientid": "sensor-1",
    "username": "{tenant}/sensor-1",
    "user_properties": "{}",
}


@tenant_view()
def rules(request, membership):
    listed = [
        (rule, selectors.rule_metrics(rule))
        for rule in selectors.rules_list(tenant=membership.tenant)
    ]
    return render(request, "portal/rules.html", _context(membership, rules=listed))


def _rule_editor(request, membership, rule=None):
    """The create and edit page: the form saves through the service; the sample-message panel
    asks the dry run (POST /api/v1/rules/test with this session) as the user types."""
    editing = rule is not None
    initial = (
        {
            "name": rule.name,
            "sql": rule.sql,
            # Webhook secrets sign requests: members who can write see them, viewers do not.
            "actions": json.dumps(
                rule.actions if membership.can_write else redact_secrets(rule.actions), indent=2
            ),
            "enabled": rule.enabled,
        }
        if editing
        else None
    )
    form = RuleForm(initial=initial, editing=editing)
    sql_position = None
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        form = RuleForm(request.POST, initial=initial, editing=editing)
        if form.is_valid():
            data = dict(form.cleaned_data)
            try:
                if editing:
                    data.pop("name")
                    rule = services.rule_update(rule, **data)
                else:
                    rule = services.rule_create(tenant=membership.tenant, **data)
            except ValidationError as error:
                _form_errors(form, error)
                if getattr(error, "line", None) is not None:
                    sql_position = {"line": error.line, "column": error.column}
            else:
                messages.success(request, f"Rule {rule.name} saved.")
                return redirect("portal:rule", name=rule.name)
    context = _context(
        membership,
        form=form,
        rule=rule,
        sample=dict(
            SAMPLE_MESSAGE,
            username=SAMPLE_MESSAGE["username"].format(tenant=membership.tenant.slug),
        ),
        sql_position=sql_position,
    )
    if editing:
        context["metrics"] = selectors.rule_metrics(rule)
        context["dead_letters"] = selectors.rule_dead_letters_list(rule=rule)[:20]
        context["dead_letter_count"] = selectors.rule_dead_letters_list(rule=rule).count()
    return render(request, "portal/rule.html", context)


@tenant_view()
def rule_new(request, membership):
    return _rule_editor(request, membership)


@tenant_view()
def rule_detail(request, membership, name: str):
    return _rule_editor(
        request, membership, selectors.rule_get(tenant=membership.tenant, name=name)
    )


@require_POST
@tenant_view(write=True)
def rule_delete(request, membership, name: str):
    services.rule_delete(selectors.rule_get(tenant=membership.tenant, name=name))
    messages.success(request, f"Rule {name} deleted.")
    return redirect("portal:rules")


@require_POST
@tenant_view(write=True)
def rule_dead_letters_replay(request, membership, name: str):
    rule = selectors.rule_get(tenant=membership.tenant, name=name)
    result = services.rule_dead_letters_replay(rule)
    messages.success(
        request,
        f"{result['delivered']} of {result['replayed']} dead letter(s) delivered; "
        f"{result['remaining']} remain.",
    )
    return redirect("portal:rule", name=name)


@require_POST
@tenant_view(write=True)
def rule_dead_letters_clear(request, membership, name: str):
    rule = selectors.rule_get(tenant=membership.tenant, name=name)
    cleared = services.rule_dead_letters_clear(rule)
    messages.success(request, f"{cleared} dead letter(s) cleared.")
    return redirect("portal:rule", name=name)

"""Portal pages: thin views over the services and selectors. Writes are POSTs (CSRF-checked);
viewers see everything and change nothing."""

from __future__ import annotations

import json
from datetime import timedelta
from functools import wraps

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import authenticate, login, logout
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render, resolve_url
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from common.contracts.rule_actions import redact_credentials, redact_secrets
from common.security import service_token
from tenants.accounts import selectors as account_selectors
from tenants.accounts import services as account_services
from tenants.accounts import throttles
from tenants.accounts import trust as accounts
from tenants.acls import selectors as acl_selectors
from tenants.acls import services as acl_services
from tenants.client_address import client_address
from tenants.devices import disconnect_reasons
from tenants.devices import onboarding as onboarding_snippets
from tenants.devices import selectors as device_selectors
from tenants.devices import services as device_services
from tenants.journey.display import code_meanings
from tenants.models import Membership
from tenants.portal.device_events import device_events
from tenants.portal.forms import (
    AclForm,
    DeviceForm,
    LoginForm,
    RuleForm,
    SignupForm,
    TokenForm,
)
from tenants.portal.shadow_editor import editor_context
from tenants.rules import selectors as rule_selectors
from tenants.rules import services as rule_services
from tenants.tenant import selectors as tenant_selectors
from tenants.usage.quota_display import quota_rows
from tenants.usage.throttling import limit_activity
from tenants.usage.throttling_display import drops_summary, throttling_items

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


# -- accounts -------------------------------------------------------------------------------


def signup(request: HttpRequest) -> HttpResponse:
    form = SignupForm(request.POST or None)
    if request.method == "POST" and throttles.login_wait(request.META, None):
        form.is_valid()
        form.add_error(None, "Too many attempts: try again in a minute.")
        return render(request, "portal/signup.html", {"form": form}, status=429)
    if request.method == "POST" and form.is_valid():
        try:
            tenant, user, _ = account_services.signup(
                **form.cleaned_data, api_token=False, address=client_address(request.META)
            )
        except ValidationError as error:
            _form_errors(form, error)
        else:
            login(request, user, backend="django.contrib.auth.backends.ModelBackend")
            request.session["tenant"] = tenant.slug
            # The tenant is the account's own at once; the address is proved by the link mailed
            # now (the banner says so until then, tenants.accounts.trust).
            accounts.verification_mail_quietly(
                user, request.build_absolute_uri(accounts.verification_path(user))
            )
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
    if account_selectors.is_member(request.user, slug):
        request.session["tenant"] = slug
    return redirect("portal:dashboard")


# -- pages ----------------------------------------------------------------------------------


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


def _tls_context() -> dict:
    """What the portal says about the broker's TLS listener wherever it shows the address."""
    return {
        "mqtt_host": settings.MQTT_PUBLIC_HOST,
        "mqtt_tls_port": settings.MQTT_PUBLIC_TLS_PORT,
        "broker_ca_file": onboarding_snippets.BROKER_CA_FILE,
        "broker_ca_offered": bool(settings.MQTT_PUBLIC_CA_FILE),
    }


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


@tenant_view()
def acls(request, membership):
    tenant = membership.tenant
    names = device_selectors.device_names(tenant=tenant)
    form = AclForm(devices=names)
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        form = AclForm(request.POST, devices=names)
        if form.is_valid():
            data = dict(form.cleaned_data)
            device_name = data.pop("device")
            device = (
                device_selectors.device_get(tenant=tenant, name=device_name)
                if device_name
                else None
            )
            try:
                acl_services.acl_add(tenant=tenant, device=device, **data)
            except ValidationError as error:
                _form_errors(form, error)
            else:
                messages.success(request, "ACL rule added.")
                return redirect("portal:acls")
    rules = acl_selectors.acl_rules_list(tenant=tenant)
    test, test_error = None, ""
    query = {k: request.GET.get(k, "").strip() for k in ("device", "action", "topic")}
    if query["topic"]:
        if query["action"] not in ("publish", "subscribe"):
            query["action"] = "publish"
        try:
            acl_services.validate_acl_test_topic(query["action"], query["topic"])
        except ValidationError as error:
            test_error = "; ".join(error.message_dict.get("topic", error.messages))
        else:
            # Another tenant's device name is a 404, like every lookup here.
            test = acl_selectors.acl_check(
                tenant=tenant,
                device_name=query["device"],
                action=query["action"],
                topic=query["topic"],
            )
    return render(
        request,
        "portal/acls.html",
        _context(
            membership,
            rules=rules,
            form=form,
            device_names=names,
            test=test,
            test_error=test_error,
            query=query,
        ),
    )


@require_POST
@tenant_view(write=True)
def acl_delete(request, membership, rule_id: int):
    acl_services.acl_delete(acl_selectors.acl_rule_get(tenant=membership.tenant, rule_id=rule_id))
    messages.success(request, "ACL rule deleted.")
    return redirect("portal:acls")


@tenant_view()
def quota(request, membership):
    tenant = membership.tenant
    limits = tenant_selectors.effective_quota(tenant)
    rows = quota_rows(tenant, limits)
    throttling = throttling_items(limit_activity(tenant=tenant), limits)
    from datetime import UTC, datetime

    from tenants.billing.services import price_book_for

    book = price_book_for(tenant.plan, datetime.now(UTC).strftime("%Y-%m"))
    prices = [
        (name, spec.get("included", 0), spec.get("per", 1), spec["tiers"])
        for name, spec in book.dimensions.items()
    ]
    return render(
        request,
        "portal/quota.html",
        _context(
            membership,
            rows=rows,
            throttling=throttling,
            plan=tenant.plan,
            book=book,
            prices=prices,
        ),
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
            _, created = account_services.api_token_create(
                user=request.user, tenant=membership.tenant, name=form.cleaned_data["name"]
            )
            form = TokenForm()
    listed = account_selectors.api_tokens_list(tenant=membership.tenant, user=request.user)
    return render(
        request,
        "portal/tokens.html",
        _context(membership, tokens=listed, form=form, created=created),
    )


@require_POST
@tenant_view(write=True)
def token_delete(request, membership, token_id: int):
    token = account_selectors.api_token_get(
        tenant=membership.tenant, user=request.user, token_id=token_id
    )
    if token is None:
        raise Http404("No such token.")
    account_services.api_token_delete(token)
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
        (rule, rule_selectors.rule_metrics(rule))
        for rule in rule_selectors.rules_list(tenant=membership.tenant)
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
            # Webhook secrets sign requests: members who can write see them, viewers do not;
            # a sink's credentials nobody sees again (saved back as shown, they are kept).
            "actions": json.dumps(
                redact_credentials(rule.actions)
                if membership.can_write
                else redact_secrets(rule.actions),
                indent=2,
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
                    rule = rule_services.rule_update(rule, **data)
                else:
                    rule = rule_services.rule_create(tenant=membership.tenant, **data)
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
        context["metrics"] = rule_selectors.rule_metrics(rule)
        context["dead_letters"] = rule_selectors.rule_dead_letters_list(rule=rule)[:20]
        context["dead_letter_count"] = rule_selectors.rule_dead_letters_count(rule=rule)
        context.update(_history_context(rule))
    return render(request, "portal/rule.html", context)


def _history_context(rule) -> dict:
    """The "Run over history" card: the last day as the default range (UTC), recent runs, and
    the run under way if there is one (the page follows it)."""
    from datetime import UTC, timedelta

    from tenants.rules.runs import selectors as run_selectors

    now = timezone.now().astimezone(UTC).replace(microsecond=0)
    runs = list(run_selectors.runs_list(rule=rule)[:5])
    active = next((r for r in runs if r.state in r.ACTIVE), None)
    return {
        "history_from": (now - timedelta(days=1)).strftime("%Y-%m-%d %H:%M:%S"),
        "history_to": now.strftime("%Y-%m-%d %H:%M:%S"),
        "history_runs": [(r, run_selectors.run_progress(r)) for r in runs],
        "history_active": active,
    }


@tenant_view()
def rule_new(request, membership):
    return _rule_editor(request, membership)


@tenant_view()
def rule_detail(request, membership, name: str):
    return _rule_editor(
        request, membership, rule_selectors.rule_get(tenant=membership.tenant, name=name)
    )


@require_POST
@tenant_view(write=True)
def rule_delete(request, membership, name: str):
    rule_services.rule_delete(rule_selectors.rule_get(tenant=membership.tenant, name=name))
    messages.success(request, f"Rule {name} deleted.")
    return redirect("portal:rules")


@require_POST
@tenant_view(write=True)
def rule_dead_letters_replay(request, membership, name: str):
    rule = rule_selectors.rule_get(tenant=membership.tenant, name=name)
    try:
        result = rule_services.rule_dead_letters_replay(rule)
    except rule_services.ReplayThrottled as exc:
        messages.error(request, str(exc))
        return redirect("portal:rule", name=name)
    done, queued = result.get("done_already", 0), result.get("queued", 0)
    messages.success(
        request,
        f"{result['delivered']} of {result['replayed']} dead letter(s) delivered; "
        + (f"{queued} back in their sink's outbox; " if queued else "")
        + (f"{done} dropped (a run over history did them since); " if done else "")
        + f"{result['remaining']} remain.",
    )
    return redirect("portal:rule", name=name)


@require_POST
@tenant_view(write=True)
def rule_dead_letters_clear(request, membership, name: str):
    rule = rule_selectors.rule_get(tenant=membership.tenant, name=name)
    cleared = rule_services.rule_dead_letters_clear(rule)
    messages.success(request, f"{cleared} dead letter(s) cleared.")
    return redirect("portal:rule", name=name)

"""The portal's alarm pages (issue 46): the Alarms page (each (alarm, key)'s state, active first,
with filters and an Acknowledge button), one key's history, and the alarm definitions (list,
create, edit, delete, switch on and off). Thin: the same selectors and services as
`/api/v1/alarms`; another tenant's alarm, by name or id, is a 404."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.utils.http import urlencode
from django.views.decorators.http import require_POST

from common.alarms.definition import SEVERITIES
from common.alarms.machine import STATES
from common.contracts.rule_actions import REDACTED
from tenants.alarms import selectors as alarm_selectors
from tenants.alarms import services as alarm_services
from tenants.alarms.preview import alarm_preview
from tenants.alarms.services import EDITABLE
from tenants.portal.alarm_forms import AlarmDefinitionForm
from tenants.portal.inspection_views import PAGE_SIZE
from tenants.portal.views import _context, _form_errors, tenant_view
from tenants.rules.runs.services import PreviewThrottled


def _filter(request, name: str, choices: tuple[str, ...] | None = None) -> str:
    value = (request.GET.get(name) or "").replace("\x00", "").strip()[:255]
    if choices is not None and value not in choices:
        return ""  # an unknown choice filters nothing (the form offers only known ones)
    return value


@tenant_view()
def alarms(request, membership):
    filters = {
        "state": _filter(request, "state", STATES),
        "severity": _filter(request, "severity", SEVERITIES),
        "device": _filter(request, "device"),
        "alarm": _filter(request, "alarm"),
    }
    rows = alarm_selectors.alarm_states_list(
        tenant=membership.tenant, **{k: v or None for k, v in filters.items()}
    )
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    chosen = {k: v for k, v in filters.items() if v}
    query = f"{urlencode(chosen)}&" if chosen else ""  # the pager's links keep the filters
    return render(
        request,
        "portal/alarms.html",
        _context(
            membership,
            page=page,
            filters=filters,
            query=query,
            states=STATES,
            severities=SEVERITIES,
        ),
    )


@require_POST
@tenant_view(write=True)
def alarm_acknowledge(request, membership, state_id: int):
    state = alarm_selectors.alarm_state_get(tenant=membership.tenant, state_id=state_id)
    note = (request.POST.get("note") or "")[:1000]
    try:
        alarm_services.alarm_acknowledge(state, by=request.user.email, note=note)
    except alarm_services.AlarmNotActive as refusal:
        messages.error(request, str(refusal))
    else:
        messages.success(
            request, f"Acknowledged the alarm {state.definition.name} for {state.key}."
        )
    back = request.POST.get("next")
    return redirect(back if _local(back) else "portal:alarms")


def _local(url: str | None) -> bool:
    """A return address on this site's Alarms pages (never elsewhere)."""
    return bool(url) and url.startswith("/alarms/") and "//" not in url and "\\" not in url


@tenant_view()
def alarm_history(request, membership, state_id: int):
    state = alarm_selectors.alarm_state_get(tenant=membership.tenant, state_id=state_id)
    rows = alarm_selectors.alarm_key_history(tenant=membership.tenant, state=state)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(
        request,
        "portal/alarm_history.html",
        _context(membership, state=state, page=page, query=""),
    )


@tenant_view()
def alarm_definitions(request, membership):
    rows = alarm_selectors.alarm_definitions_list(tenant=membership.tenant)
    return render(request, "portal/alarm_definitions.html", _context(membership, rows=rows))


def _initial(definition, can_write: bool) -> dict:
    initial = {field: getattr(definition, field) for field in EDITABLE}
    initial["name"] = definition.name
    # A webhook's secret signs its calls: members who can write see it, viewers do not.
    notes = [
        n if can_write or "secret" not in n else dict(n, secret=REDACTED)
        for n in definition.notifications or []
    ]
    initial["notifications"] = json.dumps(notes, indent=2)
    return initial


def _editor(request, membership, definition=None):
    editing = definition is not None
    initial = _initial(definition, membership.can_write) if editing else None
    form = AlarmDefinitionForm(initial=initial, editing=editing)
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        form = AlarmDefinitionForm(request.POST, initial=initial, editing=editing)
        if form.is_valid():
            data = dict(form.cleaned_data)
            name = data.pop("name")
            try:
                if editing:
                    definition = alarm_services.alarm_definition_update(definition, **data)
                else:
                    definition = alarm_services.alarm_definition_create(
                        tenant=membership.tenant, name=name, **data
                    )
            except ValidationError as error:
                _form_errors(form, error)
            else:
                messages.success(request, f"Alarm {definition.name} saved.")
                return redirect("portal:alarm-definition", name=definition.name)
    preview, asked = _preview(request, definition) if editing else (None, {})
    return render(
        request,
        "portal/alarm_definition.html",
        _context(membership, form=form, definition=definition, preview=preview, asked=asked),
    )


def _instant(text: str, field: str) -> datetime:
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValidationError({field: [f"{text!r} is not a time (2026-12-06T10:00)."]}) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)  # the form's times: UTC


def _preview(request, definition) -> tuple[dict | None, dict]:
    """ "Try it on history": the alarm over the range the page asks (GET `from`, `to`, UTC;
    the last day by default), as `POST /api/v1/alarms/{name}/preview` answers; any member."""
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    asked = {
        "from": (request.GET.get("from") or (now - timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")),
        "to": request.GET.get("to") or now.strftime("%Y-%m-%dT%H:%M"),
    }
    if "from" not in request.GET:
        return None, asked
    try:
        start, end = _instant(asked["from"], "from"), _instant(asked["to"], "to")
        return alarm_preview(definition=definition, start=start, end=end), asked
    except ValidationError as error:
        return {"error": "; ".join(error.messages)}, asked
    except PreviewThrottled as error:
        return {"error": str(error)}, asked


@tenant_view()
def alarm_definition_new(request, membership):
    return _editor(request, membership)


@tenant_view()
def alarm_definition_edit(request, membership, name: str):
    definition = alarm_selectors.alarm_definition_get(tenant=membership.tenant, name=name)
    return _editor(request, membership, definition)


@require_POST
@tenant_view(write=True)
def alarm_definition_toggle(request, membership, name: str):
    definition = alarm_selectors.alarm_definition_get(tenant=membership.tenant, name=name)
    enabled = not definition.enabled
    try:
        alarm_services.alarm_definition_enable(definition, enabled=enabled)
    except ValidationError as error:  # a definition the checks have since come to refuse
        messages.error(request, f"Alarm {name} unchanged: {'; '.join(error.messages)}")
    else:
        messages.success(request, f"Alarm {name} {'enabled' if enabled else 'disabled'}.")
    return redirect("portal:alarm-definitions")


@require_POST
@tenant_view(write=True)
def alarm_definition_delete(request, membership, name: str):
    definition = alarm_selectors.alarm_definition_get(tenant=membership.tenant, name=name)
    alarm_services.alarm_definition_delete(definition)
    messages.success(request, f"Alarm {name} deleted, with its states and history.")
    return redirect("portal:alarm-definitions")

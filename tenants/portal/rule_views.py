"""Portal pages of rules: the list with each rule's metrics, the editor (the form saves through the
service, the sample-message panel asks the dry run as one types, the "Run over history" card),
deleting a rule, and replaying or clearing its dead letters."""

from __future__ import annotations

import json

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from common.contracts.rule_actions import redact_credentials, redact_secrets
from tenants.portal.forms import RuleForm
from tenants.portal.views import _context, _form_errors, tenant_view
from tenants.rules import selectors as rule_selectors
from tenants.rules import services as rule_services

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

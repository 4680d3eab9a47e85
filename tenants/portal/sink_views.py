"""The portal's Sinks page (issue 47): every sink of the tenant's rules (a rule action of a sink
type) with its state, outbox and last error, and a Test connection button per sink. Thin: the
same selector and service as `/api/v1/sinks` and `/api/v1/rules/{name}/actions/{n}/test`; a rule
the tenant does not have (another tenant's included) is a 404. A sink's settings are edited with
its rule (the rule editor's actions)."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from tenants.portal.inspection_views import PAGE_SIZE
from tenants.portal.views import _context, tenant_view
from tenants.rules import selectors as rule_selectors
from tenants.sinks import selectors as sink_selectors
from tenants.sinks import services as sink_services


@tenant_view()
def sinks(request, membership):
    rows = sink_selectors.sinks_list(tenant=membership.tenant)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    return render(request, "portal/sinks.html", _context(membership, page=page))


@require_POST
@tenant_view(write=True)
def sink_test(request, membership, name: str, number: int):
    """Test one sink's connection (the rule `name`'s action `number`, from 1); the answer is a
    message on the Sinks page."""
    rule = rule_selectors.rule_get(tenant=membership.tenant, name=name)
    label = f"{name}, action {number}"
    try:
        answer = sink_services.sink_test(rule=rule, number=number)
    except sink_services.SinkTestThrottled as exc:
        messages.error(request, f"{label}: not tested. {exc}")
        return redirect("portal:sinks")
    if answer["ok"]:
        messages.success(request, f"{label}: the connection works.")
    else:
        messages.error(request, f"{label}: the connection failed: {answer['error']}")
    return redirect("portal:sinks")

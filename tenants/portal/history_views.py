"""The portal's History page: the tenant's history policies (list, add, delete), what its
archive keeps and why, how long, and what it stores. Thin: `history.services` writes,
`history.selectors` reads."""

from __future__ import annotations

from datetime import datetime

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from tenants.history import selectors as history_selectors
from tenants.history import services as history_services
from tenants.portal.forms import HistoryPolicyForm
from tenants.portal.views import _context, _form_errors, tenant_view
from tenants.usage.quota_display import human_bytes


@tenant_view()
def history(request, membership):
    tenant = membership.tenant
    form = HistoryPolicyForm()
    if request.method == "POST":
        if not membership.can_write:
            raise PermissionDenied("Your role can read but not change this tenant.")
        form = HistoryPolicyForm(request.POST)
        if form.is_valid():
            try:
                policy = history_services.history_policy_create(tenant=tenant, **form.cleaned_data)
            except ValidationError as error:
                _form_errors(form, error)
            else:
                days = f"{policy.days} day{'s' if policy.days != 1 else ''}"
                messages.success(request, f"History policy added: {policy.topic_filter}, {days}.")
                return redirect("portal:history")
    summary = history_selectors.history_summary(tenant=tenant)
    return render(
        request,
        "portal/history.html",
        _context(
            membership,
            form=form,
            policies=history_selectors.history_policies_list(tenant=tenant),
            summary=summary,
            history_size=(
                human_bytes(summary["history_bytes"])
                if summary["history_bytes"] is not None
                else "unknown (the object store did not answer)"
            ),
            oldest_hour=summary["oldest_hour"] and datetime.fromisoformat(summary["oldest_hour"]),
            stored_size=human_bytes(summary["stored_bytes"]),
        ),
    )


@require_POST
@tenant_view(write=True)
def history_policy_delete(request, membership, policy_id: int):
    policy = history_selectors.history_policy_get(tenant=membership.tenant, policy_id=policy_id)
    history_services.history_policy_delete(policy)
    messages.success(request, f"History policy for {policy.topic_filter} deleted.")
    return redirect("portal:history")

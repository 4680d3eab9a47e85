"""The portal's Shared groups page (issue 45): the tenant's durable shared groups
(`$share/{group}/{filter}`) with what each holds, and a button to delete one with its messages.
Thin: the same selector and service as `/api/v1/shared-groups`; a group the tenant does not have
(another tenant's included) is a 404."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from tenants.inspection import selectors as inspection
from tenants.portal.inspection_views import PAGE_SIZE, Pages
from tenants.portal.views import _context, tenant_view
from tenants.shared_groups import selectors as shared_group_selectors
from tenants.shared_groups import services as shared_group_services


@tenant_view()
def shared_groups(request, membership):
    rows = shared_group_selectors.shared_groups_list(tenant=membership.tenant)
    page = Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))
    pages = Pages(membership.tenant, operator=False)
    return render(
        request,
        "portal/shared_groups.html",
        _context(membership, page=page, pages=pages, query=""),
    )


@require_POST
@tenant_view(write=True)
def shared_group_delete(request, membership):
    """Delete one group (`group` and `filter` from the form) with the messages it holds."""
    name = (request.POST.get("group") or "")[:256]
    try:
        topic_filter = inspection.topic_filter_checked(request.POST.get("filter"), default=None)
    except inspection.TopicFilterRefused as error:
        messages.error(request, f"Nothing deleted: {error}.")
        return redirect("portal:shared-groups")
    deleted = shared_group_services.shared_group_delete(
        tenant=membership.tenant, name=name, topic_filter=topic_filter
    )
    if not deleted:
        raise Http404(f"No shared group {name!r} on the filter {topic_filter!r}.")
    messages.success(request, f"Deleted the shared group $share/{name}/{topic_filter}.")
    return redirect("portal:shared-groups")

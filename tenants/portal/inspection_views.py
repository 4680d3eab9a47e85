"""Portal pages of what the broker holds (issue 30, points 4 and 5): sessions, a session with its
subscriptions and queue, the retained messages (with delete), the topic tree. A member sees its
tenant's; an operator sees any tenant's, read-only, from the operators' overview
(`/operator/tenants/SLUG/…`). The same selectors as the API (`tenants.inspection.selectors`)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from tenants.inspection import selectors as inspection
from tenants.inspection import services as inspection_services
from tenants.models import Tenant
from tenants.portal.views import _context, tenant_view
from tenants.tenant import selectors as tenant_selectors

PAGE_SIZE = 50


@dataclass(frozen=True)
class Pages:
    """Where the inspection pages of `tenant` are: the member's own, or an operator's view."""

    tenant: Tenant
    operator: bool

    def _url(self, name: str, *args: str) -> str:
        if self.operator:
            return reverse(f"portal:operator-{name}", args=[self.tenant.slug, *args])
        return reverse(f"portal:{name}", args=list(args))

    @property
    def sessions(self) -> str:
        return self._url("sessions")

    @property
    def retained(self) -> str:
        return self._url("retained")

    @property
    def topics(self) -> str:
        return self._url("topics")

    def session(self, client_id: str) -> str:
        return self._url("session", client_id)


def _page(request: HttpRequest, rows):
    return Paginator(rows, PAGE_SIZE).get_page(request.GET.get("page"))


def _query(**kept: str | None) -> str:
    """The query string a pager link keeps (before its `page=`)."""
    kept = {k: v for k, v in kept.items() if v}
    return urlencode(kept) + "&" if kept else ""


def _as_member(membership) -> tuple[Pages, dict]:
    return Pages(membership.tenant, operator=False), _context(membership)


def _as_operator(request: HttpRequest, slug: str) -> tuple[Pages, dict]:
    if not request.user.is_staff:
        raise PermissionDenied("Operators only.")
    tenant = tenant_selectors.tenant_find(slug)
    if tenant is None:
        raise Http404(f"No tenant {slug!r}.")
    # Not `tenant`: that would make the page the operator's own tenant's (navigation, live).
    return Pages(tenant, operator=True), {"can_write": False}


# -- the pages, for either viewer -------------------------------------------------------------


def _sessions(request: HttpRequest, pages: Pages, context: dict) -> HttpResponse:
    client = (request.GET.get("client") or "").strip()[:256] or None
    page = _page(request, inspection.sessions_list(tenant=pages.tenant, client=client))
    rows = [{"s": s, "url": pages.session(s.client_id)} for s in page]
    return render(
        request,
        "portal/sessions.html",
        {
            **context,
            "pages": pages,
            "page": page,
            "rows": rows,
            "client": client or "",
            "query": _query(client=client),
        },
    )


def _session(request: HttpRequest, pages: Pages, context: dict, client_id: str) -> HttpResponse:
    session = inspection.session_get(tenant=pages.tenant, client_id=client_id)
    queue = _page(request, inspection.session_queue(tenant=pages.tenant, client_id=client_id))
    return render(
        request,
        "portal/session.html",
        {**context, "pages": pages, "session": session, "queue": queue},
    )


def _retained(request: HttpRequest, pages: Pages, context: dict) -> HttpResponse:
    raw = request.GET.get("topic") or "#"
    try:
        topic_filter = inspection.topic_filter_checked(raw)
    except inspection.TopicFilterRefused as error:
        context = {**context, "pages": pages, "topic": raw, "error": str(error), "page": None}
        return render(request, "portal/retained.html", context, status=400)
    page = _page(request, inspection.retained_list(tenant=pages.tenant, topic_filter=topic_filter))
    return render(
        request,
        "portal/retained.html",
        {
            **context,
            "pages": pages,
            "page": page,
            "topic": topic_filter,
            "query": _query(topic=topic_filter),
        },
    )


def _topics(request: HttpRequest, pages: Pages, context: dict) -> HttpResponse:
    raw = request.GET.get("topic") or "#"
    try:
        topic_filter = inspection.topic_filter_checked(raw)
    except inspection.TopicFilterRefused as error:
        context = {**context, "pages": pages, "topic": raw, "error": str(error), "tree": None}
        return render(request, "portal/topics.html", context, status=400)
    tree = inspection.topics_tree(tenant=pages.tenant, topic_filter=topic_filter)
    return render(
        request,
        "portal/topics.html",
        {**context, "pages": pages, "tree": tree, "topic": topic_filter},
    )


# -- a member's pages -------------------------------------------------------------------------


@tenant_view()
def sessions(request, membership):
    return _sessions(request, *_as_member(membership))


@tenant_view()
def session_detail(request, membership, client_id: str):
    return _session(request, *_as_member(membership), client_id)


@tenant_view()
def retained(request, membership):
    return _retained(request, *_as_member(membership))


@require_POST
@tenant_view(write=True)
def retained_delete(request, membership):
    """Delete the retained message on a topic, or all that a filter matches (asked first)."""
    raw = request.POST.get("topic") or ""
    try:
        topic_filter = inspection.topic_filter_checked(raw, default=None)
    except inspection.TopicFilterRefused as error:
        messages.error(request, f"Nothing deleted: {error}.")
        return redirect("portal:retained")
    deleted = inspection_services.retained_delete(
        tenant=membership.tenant, topic_filter=topic_filter
    )
    plural = "" if deleted == 1 else "s"
    messages.success(request, f"Deleted {deleted} retained message{plural} ({topic_filter}).")
    back = request.POST.get("back") or "#"
    return redirect(f"{reverse('portal:retained')}?topic={_quoted(back)}")


def _quoted(text: str) -> str:
    return quote(text, safe="/")


@tenant_view()
def topics(request, membership):
    return _topics(request, *_as_member(membership))


# -- an operator's view of any tenant ---------------------------------------------------------


@login_required
def operator_sessions(request, slug: str):
    return _sessions(request, *_as_operator(request, slug))


@login_required
def operator_session(request, slug: str, client_id: str):
    return _session(request, *_as_operator(request, slug), client_id)


@login_required
def operator_retained(request, slug: str):
    return _retained(request, *_as_operator(request, slug))


@login_required
def operator_topics(request, slug: str):
    return _topics(request, *_as_operator(request, slug))

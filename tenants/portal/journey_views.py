"""The Journey pages: where a tenant's messages went (searched by topic filter, client id, time
and outcome) and its clients' events (by client id, time and event), newest first, older pages
by the reader's cursor. Operators see any tenant's from their overview. Thin: `tenants.journey.selectors`
reads, `tenants.journey.display` puts rows in words."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import render

from tenants.journey.devices import devices_for_clients
from tenants.journey.display import (
    EVENT_LABELS,
    OUTCOME_LABELS,
    event_row,
    message_row,
    retention_text,
    time_text,
)
from tenants.journey.selectors import JourneyQueryError, JourneyReader, parse_time, window
from tenants.models import Tenant
from tenants.portal.views import _context, tenant_view
from tenants.tenant import selectors as tenant_selectors

PAGE_ROWS = 100
MAX_TEXT = 256  # the API's bound on a text parameter (tenants.api.views.text_param)


@dataclass
class JourneyFilters:
    """The search form's values as typed (shown back in the form) and as the reader takes them."""

    topic: str = ""
    client: str = ""
    outcomes: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    start_text: str = ""
    end_text: str = ""
    cursor: str = ""

    @classmethod
    def from_query(cls, query: QueryDict) -> JourneyFilters:
        return cls(
            topic=query.get("topic", "").strip(),
            client=query.get("client", "").strip(),
            outcomes=_ticked(query, "outcome"),
            events=_ticked(query, "event"),
            start_text=query.get("from", "").strip(),
            end_text=query.get("to", "").strip(),
            cursor=query.get("cursor", "").strip(),
        )

    def check(self) -> None:
        for name, value in (("topic", self.topic), ("client", self.client)):
            if "\x00" in value or len(value) > MAX_TEXT:
                raise JourneyQueryError(name, f"{name}: at most {MAX_TEXT} characters, no NUL")

    def window(self) -> tuple[datetime, datetime]:
        return window(parse_time(self.start_text, "from"), parse_time(self.end_text, "to"))

    @staticmethod
    def as_input(text: str, field_name: str) -> str:
        """A time as the form shows it (UTC, to the second, as the rows but the milliseconds);
        as typed when it is not a time (the error says so)."""
        try:
            moment = parse_time(text, field_name)
        except JourneyQueryError:
            return text
        return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if moment else ""


def _ticked(query: QueryDict, name: str) -> list[str]:
    """Chips come ticked (`outcome=a&outcome=b`) or linked (`outcome=a,b`, the API's form)."""
    values = [v.strip() for value in query.getlist(name) for v in value.split(",") if v.strip()]
    return list(dict.fromkeys(values))


def _with(query: QueryDict, **changes: str | None) -> str:
    """The page's query string with `changes` (None removes a parameter)."""
    params = query.copy()
    for key, value in changes.items():
        params.pop(key, None)
        if value is not None:
            params[key] = value
    return params.urlencode()


def _search(
    request: HttpRequest, tenant: Tenant, *, events: bool, link_devices: bool
) -> dict[str, Any]:
    """The rows of one page (messages, or with `events` every client's events), its paging
    links and the search form's state, for `tenant` only."""
    filters = JourneyFilters.from_query(request.GET)
    chosen, labels = (
        (filters.events, EVENT_LABELS) if events else (filters.outcomes, OUTCOME_LABELS)
    )
    context: dict[str, Any] = {
        "filters": filters,
        "showing_events": events,
        "start_input": filters.as_input(filters.start_text, "from"),
        "end_input": filters.as_input(filters.end_text, "to"),
        "chips": [
            {"name": name, "label": label, "checked": name in chosen}
            for name, label in labels.items()
        ],
        "retention": retention_text(tenant.plan.journey_retention_hours),
        "rows": [],
        "error": None,
    }
    try:
        filters.check()
        start, end = filters.window()
        common = {
            "start": start,
            "end": end,
            "client": filters.client or None,
            "limit": PAGE_ROWS,
            "cursor": filters.cursor or None,
        }
        reader = JourneyReader()
        if events:
            page = reader.tenant_events(tenant.slug, event=",".join(chosen) or None, **common)
        else:
            page = reader.messages(
                tenant.slug,
                topic=filters.topic or None,
                outcome=",".join(chosen) or None,
                **common,
            )
    except JourneyQueryError as exc:
        context["error"] = {"field": exc.field, "message": str(exc)}
        return context
    limits = tenant_selectors.effective_quota(tenant)
    describe = event_row if events else message_row
    rows = [describe(row, limits) | {"client_id": row["client_id"]} for row in page.rows]
    devices = (
        devices_for_clients(tenant=tenant, client_ids={r["client_id"] for r in rows})
        if link_devices
        else {}
    )
    for row in rows:
        row["device"] = devices.get(row["client_id"])
    context.update(
        rows=rows,
        window_text=f"{time_text(start)} to {time_text(end)}",
        older_query=_with(request.GET, cursor=page.cursor) if page.cursor else "",
        newest_query=_with(request.GET, cursor=None) if filters.cursor else None,
    )
    return context


@tenant_view()
def journey(request: HttpRequest, membership) -> HttpResponse:
    """The member's tenant's messages; another tenant's rows are never read (the reader lists
    and filters by the tenant's slug)."""
    context = _search(request, membership.tenant, events=False, link_devices=True)
    return render(request, "portal/journey.html", _context(membership, **context))


@tenant_view()
def journey_events(request: HttpRequest, membership) -> HttpResponse:
    """The member's tenant's client events, every client's: who failed to connect and why."""
    context = _search(request, membership.tenant, events=True, link_devices=True)
    return render(request, "portal/journey.html", _context(membership, **context))


def _operator_page(request: HttpRequest, slug: str, *, events: bool) -> HttpResponse:
    """For operators (staff), from the operators' overview: any tenant's journey, read-only,
    without the tenant's portal around it (its device pages are its members')."""
    if not request.user.is_staff:
        raise PermissionDenied("Operators only.")
    subject = tenant_selectors.tenant_find(slug)
    if subject is None:
        raise Http404("No Tenant matches the given query.")
    context = _search(request, subject, events=events, link_devices=False)
    return render(request, "portal/journey.html", {**context, "operator_of": subject})


@login_required
def operator_journey(request: HttpRequest, slug: str) -> HttpResponse:
    return _operator_page(request, slug, events=False)


@login_required
def operator_journey_events(request: HttpRequest, slug: str) -> HttpResponse:
    return _operator_page(request, slug, events=True)

"""Portal pages for billing: Usage (one chart per billed dimension, per day, per device and per
device group tables, the month to date in money and its forecast, what a message costs), Invoices
(lines, CSV/PDF downloads) and Quota (the limits, how often each slowed or refused something, the
plan's prices). Thin: selectors compute, `tenants.usage.charts` draws."""

from __future__ import annotations

from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.http import Http404, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from common.charges.metering import explain_publish
from tenants.billing import invoice_render
from tenants.billing import periods as billing_periods
from tenants.billing import selectors as billing_selectors
from tenants.billing.invoice_words import DEVICE_LABELS, line_words
from tenants.devices import selectors as device_selectors
from tenants.portal.views import _context, tenant_view
from tenants.tenant import selectors as tenant_selectors
from tenants.usage import charts
from tenants.usage import selectors as usage_selectors
from tenants.usage.quota_display import quota_rows
from tenants.usage.throttling import limit_activity
from tenants.usage.throttling_display import throttling_items

CHARTS = (
    ("messages", "Messages", "5 KB units"),
    ("connection_minutes", "Connection minutes", ""),
    ("rules_triggered", "Rule executions", "5 KB units"),
    ("actions_executed", "Actions executed", ""),
    ("storage_gb_hours", "Storage", "GB-hours"),
    ("job_executions", "Job executions", "remote actions"),
    ("shadow_operations", "Device shadow operations", "1 KB units"),
    ("sink_gb", "Data delivered to bucket sinks", "GB"),
)


def _daily(tenant, period: str) -> list[dict]:
    start, end = billing_selectors.period_bounds(period)
    return billing_selectors.usage_series(tenant=tenant, start=start, end=end, granularity="day")


@tenant_view()
def usage(request, membership):
    tenant = membership.tenant
    period = request.GET.get("period") or datetime.now(UTC).strftime("%Y-%m")
    try:
        current = _daily(tenant, period)
        previous_period = billing_periods.previous_period(period)
        previous = _daily(tenant, previous_period)
    except ValidationError as exc:
        raise Http404(str(exc)) from None
    drawn = []
    for key, title, unit in CHARTS:
        values = [point[key] for point in current]
        before = [point[key] for point in previous]
        drawn.append(
            {
                "key": key,
                "title": title,
                "total": sum(values),
                "previous_total": sum(before),
                "svg": charts.bar_chart(
                    title,
                    values,
                    before,
                    labels=[point["start"][8:10].lstrip("0") for point in current],
                    unit=unit,
                    chart_id=f"chart-{key}",
                ),
            }
        )
    forecast = usage_selectors.usage_forecast(tenant=tenant)
    currency = forecast["currency"]
    for dimension in forecast["dimensions"]:
        dimension["month_to_date_money"] = invoice_render.money(
            dimension["month_to_date_cents"], currency
        )
        dimension["forecast_money"] = invoice_render.money(dimension["forecast_cents"], currency)
    start, end = billing_selectors.period_bounds(period)
    by_group = usage_selectors.group_usage(tenant=tenant, start=start, end=end)["groups"]
    now = datetime.now(UTC)
    days = [point for point in current if point["start"] <= now.isoformat()]
    return render(
        request,
        "portal/usage.html",
        _context(
            membership,
            period=period,
            previous_period=previous_period,
            charts=drawn,
            days=reversed(days),
            devices=_device_rows(
                tenant, usage_selectors.device_usage(tenant=tenant, start=start, end=end)["devices"]
            ),
            groups=by_group,
            has_groups=any(g["group"] != usage_selectors.NO_GROUP for g in by_group),
            forecast=forecast,
            estimate_total=invoice_render.money(forecast["month_to_date_cents"], currency),
            forecast_total=invoice_render.money(forecast["forecast_cents"], currency),
            base_fee_money=invoice_render.money(forecast["base_fee_cents"], currency),
            explained=_explained(request),
        ),
    )


# Usage under a name no device has, led to the page where it is made: a claim's connections to
# the fleet provisioning page (its claims are per template).
_NAME_PAGES = {"$claim": "portal:provisioning"}


def _device_rows(tenant, rows: list[dict]) -> list[dict]:
    """Each per-device usage row with its words (`label`) and the page it links to (`url`, None
    for none): a device of the tenant's its own page; a claim, the browser client or the rules
    their words (the claim's the provisioning page); a device since deleted its name, marked so,
    unlinked (its page is gone: a link would be a 404)."""
    existing = set(device_selectors.device_names(tenant=tenant))
    out = []
    for row in rows:
        name = row["device"]
        label, url = DEVICE_LABELS.get(name), None
        if name in _NAME_PAGES:
            url = reverse(_NAME_PAGES[name])
        elif label is None and name in existing:
            label, url = name, reverse("portal:device", args=[name])
        elif label is None:
            label = f"{name} (deleted)"
        out.append({**row, "label": label, "url": url})
    return out


def _explained(request) -> dict | None:
    """The "what does a message cost" form's answer (`common.charges.metering`, the broker's rules),
    None until asked; a value out of range is said, not raised."""
    raw = request.GET.get("size")
    if raw is None:
        return None
    try:
        size = int(raw)
        if not 0 <= size <= 268_435_455:
            raise ValueError
    except ValueError:
        return {"error": "Give the payload size as a whole number of bytes, 0 or more."}
    try:
        subscribers = min(max(int(request.GET.get("subscribers") or 0), 0), 1_000_000)
    except ValueError:
        subscribers = 0
    explanation = explain_publish(
        payload=size,
        topic=len((request.GET.get("topic") or "")[:65_535].encode()),
        qos=int(request.GET["qos"]) if request.GET.get("qos") in ("1", "2") else 0,
        retain=request.GET.get("retain") == "on",
        deliveries=subscribers,
    )
    return explanation.as_document()


@tenant_view()
def invoices(request, membership):
    tenant = membership.tenant
    listed = list(billing_selectors.invoices_list(tenant=tenant))
    wanted = request.GET.get("period")
    selected = next((i for i in listed if i.period == wanted), listed[0] if listed else None)
    lines = []
    if selected is not None:
        lines = [{**line, **line_words(line, selected.currency)} for line in selected.line_items]
    rows = [(i, invoice_render.money(i.total_cents, i.currency)) for i in listed]
    return render(
        request,
        "portal/invoices.html",
        _context(
            membership,
            invoices=rows,
            selected=selected,
            lines=lines,
            selected_total=selected
            and invoice_render.money(selected.total_due_cents, selected.currency),
            selected_tax=selected and invoice_render.money(selected.tax_cents, selected.currency),
        ),
    )


@tenant_view()
def invoice_download(request, membership, period: str, fmt: str):
    invoice = billing_selectors.invoice_get(tenant=membership.tenant, period=period)
    name = f"invoice-{membership.tenant.slug}-{period}.{fmt}"
    if fmt == "csv":
        response = HttpResponse(invoice_render.invoice_csv(invoice), content_type="text/csv")
    else:
        response = HttpResponse(invoice_render.invoice_pdf(invoice), content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


@tenant_view()
def quota(request, membership):
    tenant = membership.tenant
    limits = tenant_selectors.effective_quota(tenant)
    rows = quota_rows(tenant, limits)
    throttling = throttling_items(limit_activity(tenant=tenant), limits)
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

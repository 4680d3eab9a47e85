"""Billing reads for the portal and the API, always scoped to one tenant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import Sum
from django.db.models.functions import TruncDay, TruncHour
from django.http import Http404

from common.charges.pricing import BYTES_PER_GB, USAGE_COLUMN, build_invoice
from tenants.billing.periods import period_bounds
from tenants.models import Invoice, Tenant, Usage

GRANULARITIES = {"hour": (TruncHour, timedelta(hours=1)), "day": (TruncDay, timedelta(days=1))}
MAX_POINTS = 24 * 93  # about three months of hours, a few years of days
SERIES_COLUMNS = {
    "messages": "message_units",
    "connection_minutes": "connection_minutes",
    "rules_triggered": "rules_triggered",
    "actions_executed": "actions_executed",
    "storage_byte_hours": "storage_byte_hours",
    "publishes_in": "messages_in",
    "deliveries_out": "messages_out",
    "bytes_in": "bytes_in",
    "bytes_out": "bytes_out",
    "shadow_operations": "shadow_operations",
    "job_executions": "job_executions",
    "sink_bytes": "sink_bytes",
}


def usage_series(
    *, tenant: Tenant, start: datetime, end: datetime, granularity: str
) -> list[dict[str, Any]]:
    """The tenant's usage per hour or day in [start, end), every bucket present (zeros too)."""
    if granularity not in GRANULARITIES:
        raise ValidationError({"granularity": ["Use hour or day."]})
    if end <= start:
        raise ValidationError({"to": ["Must be after `from`."]})
    trunc, step = GRANULARITIES[granularity]
    first = start.replace(minute=0, second=0, microsecond=0)
    if granularity == "day":
        first = first.replace(hour=0)
    if (end - first) / step > MAX_POINTS:
        raise ValidationError({"to": [f"At most {MAX_POINTS} {granularity}s per request."]})
    rows = (
        Usage.objects.filter(tenant=tenant, minute__gte=start, minute__lt=end)
        .annotate(bucket=trunc("minute", tzinfo=UTC))
        .values("bucket")
        .annotate(**{name: Sum(column) for name, column in SERIES_COLUMNS.items()})
        .order_by("bucket")
    )
    found = {row["bucket"]: row for row in rows}
    series, at = [], first
    while at < end:
        row = found.get(at, {})
        point = {"start": at.isoformat().replace("+00:00", "Z")}
        for name in SERIES_COLUMNS:
            point[name] = int(row.get(name) or 0)
        point["storage_gb_hours"] = float(Decimal(point["storage_byte_hours"]) / BYTES_PER_GB)
        point["sink_gb"] = float(Decimal(point["sink_bytes"]) / BYTES_PER_GB)
        series.append(point)
        at += step
    return series


# What a tenant may see: issued (and paid) invoices. A draft is the operators' (Django admin) until
# it is issued: its numbers may still change, so a tenant never sees one, in the API or the portal.
TENANT_VISIBLE = (Invoice.Status.ISSUED, Invoice.Status.PAID)


def invoices_list(*, tenant: Tenant):
    return Invoice.objects.filter(tenant=tenant, status__in=TENANT_VISIBLE).order_by("-period")


def invoice_get(*, tenant: Tenant, period: str) -> Invoice:
    invoice = Invoice.objects.filter(
        tenant=tenant, period=period, status__in=TENANT_VISIBLE
    ).first()
    if invoice is None:
        raise Http404(f"No invoice for {period}.")
    return invoice


def month_to_date_estimate(*, tenant: Tenant, now: datetime | None = None) -> dict[str, Any]:
    """What the current month would cost so far, priced like the job prices it, but from the
    Postgres minutes (an estimate: the usage log in the object store is what gets billed)."""
    from tenants.billing.services import price_book_for

    now = now or datetime.now(UTC)
    period = now.strftime("%Y-%m")
    start, _ = period_bounds(period)
    sums = Usage.objects.filter(tenant=tenant, minute__gte=start, minute__lt=now).aggregate(
        **{column: Sum(SERIES_COLUMNS.get(column, column)) for column in set(USAGE_COLUMN.values())}
    )
    usage = {column: int(value or 0) for column, value in sums.items()}
    book = price_book_for(tenant.plan, period)
    document = build_invoice(
        tenant=tenant.slug,
        period=period,
        usage=usage,
        usage_digest="estimate",
        price_book=book.as_document(),
    )
    return {
        "period": period,
        "as_of": now.isoformat(),
        "currency": document["currency"],
        "lines": document["lines"],
        "total_cents": document["total_cents"],
    }


def revenue_by_period() -> list[dict[str, Any]]:
    """Per month (newest first) and currency: tenants invoiced and the total billed, by status."""
    from django.db.models import Count

    rows = (
        Invoice.objects.values("period", "currency", "status")
        .annotate(tenants=Count("tenant", distinct=True), total_cents=Sum("total_cents"))
        .order_by("-period", "currency", "status")
    )
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        entry = out.setdefault(
            (r["period"], r["currency"]),
            {
                "period": r["period"],
                "currency": r["currency"],
                "tenants": 0,
                "total_cents": 0,
                "by_status": {},
            },
        )
        entry["tenants"] += r["tenants"]
        entry["total_cents"] += r["total_cents"]
        entry["by_status"][r["status"]] = r["total_cents"]
    return list(out.values())

"""Budget reads: the month to date in money, the budget against it, the alerts sent.

The month to date is priced exactly as the invoice will be (`common.charges.pricing.build_invoice`, the
function the billing job calls): the same price book version, the base fee prorated by the same
plan terms, the month's credits, each line rounded once; only the usage differs in where it is
read, here the per-minute rows the brokers write to Postgres (the bill reads the usage log, which
holds the same rows)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db.models import QuerySet, Sum

from common.charges.pricing import USAGE_COLUMN, build_invoice
from tenants.billing.periods import period_bounds
from tenants.billing.selectors import SERIES_COLUMNS
from tenants.models import Budget, BudgetAlert, Credit, Tenant, Usage

# The usage-log columns the bill sums, as `tenants_usage` columns (`messages` is `message_units`).
BILLED_COLUMNS = {column: SERIES_COLUMNS.get(column, column) for column in USAGE_COLUMN.values()}
DEFAULT_THRESHOLDS = (50, 80, 100)


def usage_month_to_date(*, tenant: Tenant, now: datetime) -> dict[str, int]:
    """The tenant's billed usage from the 1st of `now`'s month (UTC) up to `now`."""
    start, _ = period_bounds(now.strftime("%Y-%m"))
    sums = Usage.objects.filter(tenant=tenant, minute__gte=start, minute__lt=now).aggregate(
        **{column: Sum(source) for column, source in BILLED_COLUMNS.items()}
    )
    return {column: int(value or 0) for column, value in sums.items()}


def usage_month_to_date_by_tenant(*, now: datetime) -> dict[int, dict[str, int]]:
    """`usage_month_to_date` of every tenant with usage this month, in one query."""
    start, _ = period_bounds(now.strftime("%Y-%m"))
    rows = (
        Usage.objects.filter(minute__gte=start, minute__lt=now)
        .values("tenant_id")
        .annotate(**{column: Sum(source) for column, source in BILLED_COLUMNS.items()})
    )
    return {
        row["tenant_id"]: {column: int(row[column] or 0) for column in BILLED_COLUMNS}
        for row in rows
    }


def month_to_date_spend(
    *, tenant: Tenant, now: datetime | None = None, usage: dict[str, int] | None = None
) -> dict[str, Any]:
    """What the tenant's invoice for this month would say if the month ended now: `spend_cents`
    (its total, to the cent), `currency`, `lines`, `period`, `as_of`."""
    from tenants.billing.services import plan_terms, price_book_for

    now = now or datetime.now(UTC)
    period = now.strftime("%Y-%m")
    if usage is None:
        usage = usage_month_to_date(tenant=tenant, now=now)
    plan, terms = plan_terms(tenant, period)
    book = price_book_for(plan, period)
    credits = [
        {"amount_cents": c.amount_cents, "reason": c.reason}
        for c in Credit.objects.filter(tenant=tenant, period=period).order_by("id")
    ]
    document = build_invoice(
        tenant=tenant.slug,
        period=period,
        usage=usage,
        usage_digest="month to date",
        price_book=book.as_document(),
        credits=credits,
        terms=terms,
    )
    return {
        "period": period,
        "as_of": now,
        "currency": document["currency"],
        "spend_cents": document["total_cents"],
        "lines": document["lines"],
        "usage": document["usage"],
        "price_book": book,
    }


def budget_get(*, tenant: Tenant) -> Budget | None:
    return Budget.objects.filter(tenant=tenant).first()


def alerts_list(*, tenant: Tenant) -> QuerySet[BudgetAlert]:
    """The tenant's alerts, newest first: only its own, by construction."""
    return BudgetAlert.objects.filter(tenant=tenant).select_related("tenant")


def percent_of(spend_cents: int, monthly_cents: int) -> float:
    return round(spend_cents * 100 / monthly_cents, 1) if monthly_cents else 0.0


def budget_status(*, tenant: Tenant, now: datetime | None = None) -> dict[str, Any]:
    """The budget as the API and the portal show it: its settings (or nulls when none is set),
    the month to date against it, whether new connections are refused, this month's alerts."""
    spend = month_to_date_spend(tenant=tenant, now=now)
    budget = budget_get(tenant=tenant)
    alerts = list(alerts_list(tenant=tenant).filter(period=spend["period"]))
    monthly = budget.monthly_cents if budget else None
    return {
        "monthly_cents": monthly,
        "thresholds": list(budget.thresholds) if budget else list(DEFAULT_THRESHOLDS),
        "at_limit": budget.at_limit if budget else Budget.AtLimit.NOTIFY.value,
        "webhook_url": (budget.webhook_url or None) if budget else None,
        "webhook_secret_set": bool(budget and budget.webhook_secret),
        "currency": spend["currency"],
        "period": spend["period"],
        "as_of": spend["as_of"],
        "spend_cents": spend["spend_cents"],
        "percent": percent_of(spend["spend_cents"], monthly) if monthly else None,
        "degraded": tenant.budget_degraded,
        "updated_at": budget.updated_at if budget else None,
        "alerts": alerts,
    }

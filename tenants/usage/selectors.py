"""Usage a tenant can read before the bill: per device and per device group per day, and the
month's forecast.

Both read what the brokers meter into Postgres (`Usage` per tenant-minute, `DeviceUsage` per
device-day); the bill reads the usage log, which holds the same tenant minutes. Money is priced by
`budget_selectors.month_to_date_spend`, the invoice's own pricing (`common.charges.pricing`).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.core.exceptions import ValidationError
from django.db import connection
from django.db.models import Count, QuerySet, Sum

from common.charges.pricing import (
    BYTES_PER_GB,
    DESCRIPTIONS,
    DIMENSIONS,
    GB_DIMENSIONS,
    LATER_DIMENSIONS,
    USAGE_COLUMN,
    quantity_of,
)
from tenants.billing.periods import period_bounds
from tenants.budgets.selectors import BILLED_COLUMNS, month_to_date_spend
from tenants.models import Device, DeviceGroup, DeviceUsage, Tenant, Usage

MAX_DEVICE_DAYS = 93  # a quarter of days per request
# The per-device figures, as the API names them (rows, totals), from DeviceUsage's columns: what
# a device causes of each billed dimension. Storage is the tenant's alone (docs/reference/billing.md).
DEVICE_FIGURES = {
    "messages": "message_units",
    "connection_minutes": "connection_minutes",
    "rules_triggered": "rules_triggered",
    "actions_executed": "actions_executed",
    "shadow_operations": "shadow_operations",
}
NO_GROUP = "(no group)"  # no group can take this name (group names are letters, digits, _.:-)
FORECAST_WINDOW_DAYS = 7
FORECAST_METHOD = (
    "month to date + daily rate × days left (from now to the month's end), the daily rate "
    f"being the average of the last {FORECAST_WINDOW_DAYS} complete UTC days of this month "
    "(fewer early in the month; on the 1st, today's usage so far scaled to a whole day, at least "
    "one hour counted); for a tenant created this month, counted from its creation, not from "
    "days before it existed; never below the month to date; priced like the invoice"
)


def _day_span(start: datetime, end: datetime) -> tuple[date, date]:
    """The UTC days that [start, end) touches, as [first, after_last)."""
    first = start.astimezone(UTC).date()
    end = end.astimezone(UTC)
    after = end.date() if end.time() == datetime.min.time() else end.date() + timedelta(days=1)
    return first, after


def _device_days(start: datetime, end: datetime, by: str) -> tuple[date, date]:
    first, after = _day_span(start, end)
    if after <= first:
        raise ValidationError({"to": ["Must be after `from`."]})
    if (after - first).days > MAX_DEVICE_DAYS:
        raise ValidationError({"to": [f"At most {MAX_DEVICE_DAYS} days per request by {by}."]})
    return first, after


def device_usage(*, tenant: Tenant, start: datetime, end: datetime) -> dict[str, Any]:
    """The tenant's usage per device and UTC day over the days [start, end) touches: `rows`
    (day, device, then each of `DEVICE_FIGURES`: messages in units, connection_minutes,
    rules_triggered in units, actions_executed, shadow_operations in 1 KiB units; days without
    usage left out) and `devices` (each device's totals, the busiest first)."""
    first, after = _device_days(start, end, "device")
    rows = DeviceUsage.objects.filter(tenant=tenant, day__gte=first, day__lt=after).order_by(
        "day", "device"
    )
    out, totals = [], {}
    for row in rows:
        figures = {name: getattr(row, column) for name, column in DEVICE_FIGURES.items()}
        out.append({"day": row.day.isoformat(), "device": row.device, **figures})
        total = totals.setdefault(
            row.device, {"device": row.device, **dict.fromkeys(DEVICE_FIGURES, 0)}
        )
        for name, value in figures.items():
            total[name] += value
    devices = sorted(totals.values(), key=lambda t: (-t["messages"], t["device"]))
    return {"rows": out, "devices": devices}


# The per-device rows joined to the groups their device is in now, by the device's name within
# the tenant: a device in two groups yields two rows (it counts in each), one in none (or usage
# under a name no device of the tenant has now: deleted, `$console`, `$rules`) one row, group NULL.
_GROUP_USAGE_SQL = """
SELECT {keys}, {sums}, COUNT(DISTINCT u.device)
  FROM {usage} u
  LEFT JOIN {device} d ON d.tenant_id = u.tenant_id AND d.name = u.device
  LEFT JOIN {member} m ON m.device_id = d.id
  LEFT JOIN {group} g ON g.id = m.devicegroup_id AND g.tenant_id = u.tenant_id
 WHERE u.tenant_id = %s AND u.day >= %s AND u.day < %s
 GROUP BY {keys}
"""


def _group_sums(tenant: Tenant, first: date, after: date, *, per_day: bool) -> list[tuple]:
    keys = "u.day, g.name" if per_day else "g.name"
    sql = _GROUP_USAGE_SQL.format(
        keys=keys,
        sums=", ".join(f"SUM(u.{column})" for column in DEVICE_FIGURES.values()),
        usage=DeviceUsage._meta.db_table,
        device=Device._meta.db_table,
        member=DeviceGroup.devices.through._meta.db_table,
        group=DeviceGroup._meta.db_table,
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [tenant.id, first, after])
        return cursor.fetchall()


def group_usage(*, tenant: Tenant, start: datetime, end: datetime) -> dict[str, Any]:
    """The tenant's per-device usage summed per device group (the groups as they are now) over
    the UTC days [start, end) touches: `rows` (day, group, each of `DEVICE_FIGURES`, devices
    with usage; days and groups without usage left out) and `groups` (every group's totals, the
    busiest first, with `members` its devices now; `NO_GROUP` last, when it has usage). A device
    in several groups counts in each, so the groups can add up to more than the tenant used."""
    first, after = _device_days(start, end, "group")

    def name(group: str | None) -> str:
        return NO_GROUP if group is None else group

    def figures(sums: tuple) -> dict[str, int]:
        return {key: int(value) for key, value in zip(DEVICE_FIGURES, sums, strict=True)}

    rows = [
        {"day": row[0].isoformat(), "group": name(row[1]), **figures(row[2:-1]), "devices": row[-1]}
        for row in _group_sums(tenant, first, after, per_day=True)
    ]
    rows.sort(key=lambda r: (r["day"], r["group"] == NO_GROUP, r["group"]))
    members = dict(
        DeviceGroup.objects.filter(tenant=tenant)
        .annotate(members=Count("devices"))
        .values_list("name", "members")
    )
    totals = {
        group: {
            "group": group,
            "members": count,
            "devices": 0,
            **dict.fromkeys(DEVICE_FIGURES, 0),
        }
        for group, count in members.items()
    }
    for row in _group_sums(tenant, first, after, per_day=False):
        total = totals.setdefault(name(row[0]), {"group": name(row[0]), "members": None})
        total.update(devices=row[-1], **figures(row[1:-1]))
    groups = sorted(
        totals.values(),
        key=lambda t: (
            t["group"] == NO_GROUP,
            -t["messages"],
            -t["connection_minutes"],
            t["group"],
        ),
    )
    return {"rows": rows, "groups": groups}


def _sums(tenant: Tenant, start: datetime, end: datetime) -> dict[str, int]:
    sums = Usage.objects.filter(tenant=tenant, minute__gte=start, minute__lt=end).aggregate(
        **{column: Sum(source) for column, source in BILLED_COLUMNS.items()}
    )
    return {column: int(value or 0) for column, value in sums.items()}


def _daily_rate(tenant: Tenant, month_start: datetime, now: datetime) -> dict[str, Decimal]:
    """Per usage-log column, the usage per day the forecast goes on at (`FORECAST_METHOD`)."""
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    # A tenant created this month used nothing before it existed: averaging over those days
    # (issue 41) had a tenant created today forecast exactly its month to date.
    origin = max(month_start, min(tenant.created_at, now))
    window_start = max(origin, today - timedelta(days=FORECAST_WINDOW_DAYS))
    if window_start < today:
        days = Decimal((today - window_start).total_seconds()) / 86400  # its first day in part
        sums = _sums(tenant, window_start, today)
        return {column: Decimal(value) / days for column, value in sums.items()}
    since = max(today, origin)
    hours = max(Decimal(1), Decimal((now - since).total_seconds()) / 3600)
    sums = _sums(tenant, today, now)
    return {column: Decimal(value) * 24 / hours for column, value in sums.items()}


def usage_forecast(*, tenant: Tenant, now: datetime | None = None) -> dict[str, Any]:
    """This month so far and where it lands: per billed dimension the month to date and the
    forecast to month end, in units and in money, with the plan's included amounts."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    period = now.strftime("%Y-%m")
    start, end = period_bounds(period)
    so_far = _sums(tenant, start, now)
    rate = _daily_rate(tenant, start, now)
    days_left = Decimal((end - now).total_seconds()) / 86400
    forecast = {
        column: max(
            so_far[column],
            int((so_far[column] + rate[column] * days_left).to_integral_value(ROUND_HALF_UP)),
        )
        for column in so_far
    }
    spent = month_to_date_spend(tenant=tenant, now=now, usage=so_far)
    landing = month_to_date_spend(tenant=tenant, now=now, usage=forecast)
    specs = spent["price_book"].as_document()["dimensions"]
    mtd_lines = {line["code"]: line for line in spent["lines"]}
    forecast_lines = {line["code"]: line for line in landing["lines"]}
    dimensions = []
    for dimension in DIMENSIONS:
        column = USAGE_COLUMN[dimension]
        line, ahead = mtd_lines.get(dimension), forecast_lines.get(dimension)
        daily = rate[column] / BYTES_PER_GB if dimension in GB_DIMENSIONS else rate[column]
        dimensions.append(
            {
                "dimension": dimension,
                "description": DESCRIPTIONS[dimension],
                "month_to_date": _number(quantity_of(dimension, so_far[column])),
                "forecast": _number(quantity_of(dimension, forecast[column])),
                "daily_rate": float(round(daily, 3)),
                "priced": line is not None,
                "included": (specs.get(dimension) or LATER_DIMENSIONS[dimension]).get("included", 0)
                if line
                else None,
                "billable": line["billable"] if line else None,
                "unit_price": line["unit_price"] if line else None,
                "per": line["per"] if line else None,
                "month_to_date_cents": line["amount_cents"] if line else 0,
                "forecast_cents": ahead["amount_cents"] if ahead else 0,
            }
        )
    return {
        "period": period,
        "as_of": now.isoformat().replace("+00:00", "Z"),
        "currency": spent["currency"],
        "method": FORECAST_METHOD,
        "days_in_period": (end - start).days,
        "days_left": float(round(days_left, 4)),
        "dimensions": dimensions,
        "base_fee_cents": sum(
            line["amount_cents"] for line in spent["lines"] if line["code"] == "base_fee"
        ),
        "month_to_date_cents": spent["spend_cents"],
        "forecast_cents": max(spent["spend_cents"], landing["spend_cents"]),
    }


def _number(value: Decimal) -> int | float:
    return int(value) if value == value.to_integral_value() else float(value)


def usage_list(*, tenant: Tenant, since: datetime | None = None) -> QuerySet[Usage]:
    """A tenant's usage rows (per minute), for the API's usage endpoint; from `since` on."""
    usage = Usage.objects.filter(tenant=tenant)
    return usage if since is None else usage.filter(minute__gte=since)

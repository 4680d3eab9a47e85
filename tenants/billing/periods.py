"""A billing period (`YYYY-MM`, UTC) as the instants it spans. Plain time arithmetic, so every
billing module can use it without importing another's reads or writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.core.exceptions import ValidationError


def period_bounds(period: str) -> tuple[datetime, datetime]:
    try:
        start = datetime.strptime(period, "%Y-%m").replace(tzinfo=UTC)
    except ValueError:
        raise ValidationError({"period": [f"{period!r}: use YYYY-MM."]}) from None
    return start, (start + timedelta(days=32)).replace(day=1)


def previous_period(period: str) -> str:
    start, _ = period_bounds(period)
    return (start - timedelta(days=1)).strftime("%Y-%m")

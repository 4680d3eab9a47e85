"""One time format for the whole portal: ISO-like, in UTC, to the second (`2026-11-27 14:02:03
UTC`), or to the millisecond where events come faster than that (the journey). The API answers
in UTC too, and people compare the two; the local time is on hover (`{{ moment|utc }}` in
`tenants.templatetags.portal_time`, filled in by portal.js)."""

from __future__ import annotations

from datetime import UTC, date, datetime


def utc_text(moment: datetime, milliseconds: bool = False) -> str:
    """`2026-11-27 14:02:03 UTC`, or `2026-11-27 14:02:03.123 UTC`; a naive time is taken as UTC
    (the project's datetimes are aware; a naive one was never local)."""
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    fraction = f".{moment.microsecond // 1000:03d}" if milliseconds else ""
    return f"{moment:%Y-%m-%d %H:%M:%S}{fraction} UTC"


def utc_iso(moment: datetime | date) -> str:
    """The machine-readable form for `<time datetime=…>`: `2026-11-27T14:02:03.123Z`, or the
    date alone for a date."""
    if not isinstance(moment, datetime):
        return moment.isoformat()
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}Z"

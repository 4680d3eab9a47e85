"""`{% load portal_time %}`, then `{{ moment|utc }}` (to the second) or `{{ moment|utc_ms }}`:
a `<time>` in the portal's one format (`tenants.time_display`), its `datetime` attribute for
portal.js to put the reader's local time in the title. Nothing for None, so
`{{ moment|utc|default:"never" }}` reads as it should."""

from __future__ import annotations

from datetime import date, datetime

from django import template
from django.utils.html import format_html

from tenants.time_display import utc_iso, utc_text

register = template.Library()


def _time(moment: datetime | date | None, milliseconds: bool) -> str:
    if moment is None or moment == "":
        return ""
    if not isinstance(moment, datetime):  # a date: a day, the same everywhere
        return format_html('<time datetime="{}">{}</time>', utc_iso(moment), moment.isoformat())
    text = utc_text(moment, milliseconds)
    return format_html('<time datetime="{}" title="{}">{}</time>', utc_iso(moment), text, text)


@register.filter
def utc(moment: datetime | date | None) -> str:
    return _time(moment, milliseconds=False)


@register.filter
def utc_ms(moment: datetime | date | None) -> str:
    return _time(moment, milliseconds=True)

"""Template filters that link a portal counter to the journey rows behind it
(`tenants.journey.links`): `{% load journey_tags %}`, then `{{ cause|journey_for_cause }}`,
`{{ limit|journey_for_limit }}`, `{% journey_losses %}`; each gives "" where no row stands
behind the figure (a refused subscription is not recorded yet). `{{ topic|topic_breaks }}` shows a
topic that wraps only between its levels."""

from __future__ import annotations

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from tenants.journey.links import cause_url, journey_url, limit_url

register = template.Library()


@register.filter
def journey_for_cause(cause: str) -> str:
    return cause_url(cause)


@register.filter
def journey_for_limit(limit: str) -> str:
    return limit_url(limit)


@register.simple_tag
def journey_losses() -> str:
    """Every outcome that lost a message for someone (`journey_schema.LOSSES`)."""
    return journey_url()


@register.filter
def topic_breaks(topic: str) -> SafeString:
    """The topic, escaped, with a line-break opportunity after each `/`: a narrow column wraps
    it between its levels, not inside a word."""
    return mark_safe("/<wbr>".join(escape(level) for level in str(topic).split("/")))

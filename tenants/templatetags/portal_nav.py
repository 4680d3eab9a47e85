"""`{% portal_nav %}`: the side navigation of `tenants.portal.navigation`, for base.html."""

from __future__ import annotations

from django import template

from tenants.portal.navigation import navigation

register = template.Library()


@register.inclusion_tag("portal/_nav.html", takes_context=True)
def portal_nav(context: template.Context) -> dict:
    request = context["request"]
    return {"groups": navigation(request.path, request.user, context.get("membership"))}

"""The pages a request that went wrong gets (`handler400/403/404/500` in the root URLconf).

Under /api/ the answer is the API's JSON error envelope (`tenants.api.errors`), even for a URL no
view matches; elsewhere a portal page in the product's layout, never Django's DEBUG pages
(`settings.DEBUG` is off under `make run` as well, see settings.py) nor its bare defaults."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template.loader import render_to_string

logger = logging.getLogger(__name__)

_PAGES = {
    400: ("Bad request", "The request could not be understood."),
    403: ("Not allowed", "Your account or role may not open this page."),
    404: ("Page not found", "There is no page at this address."),
    500: ("Something went wrong", "The error is logged; please try again in a moment."),
}
_API = {
    400: ("bad_request", "Bad request"),
    403: ("permission_denied", "Not allowed"),
    404: ("not_found", "No API endpoint at this address"),
    500: ("server_error", "Internal error (it is logged)"),
}


def _said(exception: BaseException | None) -> str:
    """What our own code said when it raised (`Http404("No such device.")`); Django's resolver
    passes a dict of the URL patterns it tried, which is never shown."""
    said = exception.args[0] if exception is not None and exception.args else None
    return said if isinstance(said, str) and len(said) <= 200 else ""


def _answer(request: HttpRequest, status: int, exception: BaseException | None) -> HttpResponse:
    title, words = _PAGES[status]
    said = _said(exception) if status != 500 else ""
    if request.path.startswith("/api/"):
        code, meaning = _API[status]
        message = said or f"{meaning}: {request.method} {request.path}"
        body = {"error": {"code": code, "message": message}}
        return JsonResponse(body, status=status)
    context = {"status": status, "heading": title, "words": said or words, "request": request}
    try:
        context.update(_member_context(request))
        html = render_to_string("portal/error.html", context, request=request)
    except Exception:  # the page of last resort must not fail itself (the database may be down)
        logger.exception("error page not rendered")
        html = (
            f"<!doctype html><title>{title} · MQTT platform</title><h1>{title}</h1><p>{words}</p>"
        )
    return HttpResponse(html, status=status)


def _member_context(request: HttpRequest) -> dict:
    """The member's tenant, so the page keeps their navigation."""
    from tenants.accounts import selectors as account_selectors

    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated or not hasattr(request, "session"):
        return {}
    membership = account_selectors.current_membership(user, request.session.get("tenant"))
    if membership is None:
        return {}
    return {"tenant": membership.tenant, "membership": membership}


def bad_request(request: HttpRequest, exception: BaseException) -> HttpResponse:
    return _answer(request, 400, exception)


def permission_denied(request: HttpRequest, exception: BaseException) -> HttpResponse:
    return _answer(request, 403, exception)


def page_not_found(request: HttpRequest, exception: BaseException) -> HttpResponse:
    return _answer(request, 404, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    return _answer(request, 500, None)

"""One JSON error shape for the whole API: {"error": {"code", "message", "fields"?}}, plus
`line` and `column` (1-based) when the error is at a place in a text, as in rule SQL."""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

logger = logging.getLogger("tenants.api")


def _path(context) -> str:
    request = context.get("request") if isinstance(context, dict) else None
    return getattr(request, "path", "?")


def exception_handler(exc, context):
    # Where the input went wrong, when the error knows (rule SQL: 1-based line and column).
    position = {
        key: getattr(exc, key)
        for key in ("line", "column")
        if isinstance(getattr(exc, key, None), int)
    }
    quota = None
    if isinstance(exc, DjangoValidationError) and hasattr(exc, "quota"):
        # A plan's limit (tenants.quota_refusals.QuotaExceeded): a 403 that names the quota key.
        quota = {"quota": exc.quota, "limit": getattr(exc, "limit", None)}
    if isinstance(exc, DjangoValidationError):
        fields = (
            exc.message_dict if hasattr(exc, "error_dict") else {"non_field_errors": exc.messages}
        )
        exc = exceptions.ValidationError(fields)
    response = drf_exception_handler(exc, context)
    if response is None:
        # Not an API error: a bug. The caller gets the one error shape, never a traceback page;
        # the log gets the traceback.
        logger.error("API error on %s", _path(context), exc_info=exc)
        set_rollback()
        body = {"error": {"code": "server_error", "message": "Internal error (it is logged)."}}
        return Response(body, status=status.HTTP_500_INTERNAL_SERVER_ERROR)
    if isinstance(exc, exceptions.ValidationError):
        fields = (
            response.data
            if isinstance(response.data, dict)
            else {"non_field_errors": response.data}
        )
        first = _first_message(fields)
        body = {"error": {"code": "invalid", "message": first, "fields": fields, **position}}
        if quota is not None:
            body["error"].update(code="quota_exceeded", **quota)
            response.status_code = status.HTTP_403_FORBIDDEN
    elif isinstance(exc, Http404):
        body = {"error": {"code": "not_found", "message": str(exc) or "Not found."}}
    else:
        detail = (
            response.data.get("detail", "") if isinstance(response.data, dict) else response.data
        )
        code = getattr(exc, "default_code", "error")
        if isinstance(exc, exceptions.APIException) and hasattr(exc.detail, "code"):
            code = exc.detail.code or code
        body = {"error": {"code": code, "message": str(detail)}}
        # What the caller needs to act on the error (a 409's run that holds the rule, and where
        # to cancel it), beside the words.
        body["error"].update(getattr(exc, "extra", None) or {})
    response.data = body
    return response


def _first_message(fields) -> str:
    for key, value in fields.items():
        while isinstance(value, (list, tuple)) and value:
            value = value[0]
        if isinstance(value, dict):
            return _first_message(value)
        return str(value) if key == "non_field_errors" else f"{key}: {value}"
    return "Invalid input."


__all__ = ["exception_handler", "status", "Response"]

"""The web's access log in the platform's one log format (`common/runtime/logs.py`): one INFO line per
HTTP request from logger `control_plane.access`, with method, path, status, duration and client
address as fields (JSON with `LOG_FORMAT=json`). It replaces Daphne's own access log, which
writes its own format to stdout."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from tenants.client_address import client_address

log = logging.getLogger("control_plane.access")


def access_log(get_response: Callable[[HttpRequest], HttpResponse]):
    def middleware(request: HttpRequest) -> HttpResponse:
        started = time.monotonic()
        response = get_response(request)
        if log.isEnabledFor(logging.INFO):
            path = request.get_full_path()[:500]
            log.info(
                "%s %s %s",
                request.method,
                path,
                response.status_code,
                extra={
                    "fields": {
                        "method": request.method,
                        "path": path,
                        "status": response.status_code,
                        "duration_ms": round((time.monotonic() - started) * 1000, 1),
                        # The peer, or the client a trusted proxy names (TRUSTED_PROXIES).
                        "client": client_address(request.META),
                    }
                },
            )
        return response

    return middleware

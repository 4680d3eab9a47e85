"""Security headers Django's own middleware does not set: a Content-Security-Policy (scripts,
styles, images, connections only from the portal itself and the broker's WebSocket; no framing, no plugins, forms post only
here) and a Referrer-Policy. `X-Frame-Options: DENY` and `nosniff` come from Django's settings
(X_FRAME_OPTIONS, SECURE_CONTENT_TYPE_NOSNIFF).

The portal has no inline script or style (its JavaScript is in static files), so the policy needs
no 'unsafe-inline'. The Swagger UI page at /api/docs/ (drf-spectacular) initialises itself with an
inline script, and the Django admin (operators only) has inline styles: those two allow inline
scripts and styles, nothing else does. The browser MQTT client's page alone may start a worker
from a blob: URL (MQTT.js's timers).
"""

from __future__ import annotations

from urllib.parse import urlsplit

from django.conf import settings


def _broker_websocket() -> str:
    """The origin of the broker's WebSocket as browsers reach it (the portal's MQTT client
    connects there: another port, so not 'self')."""
    url = urlsplit(getattr(settings, "MQTT_PUBLIC_WS_URL", "") or "")
    return f"{url.scheme}://{url.netloc}" if url.scheme in ("ws", "wss") and url.netloc else ""


POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        f"connect-src 'self' {_broker_websocket()}".rstrip(),
        "font-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
# The browser MQTT client (/client/): MQTT.js runs its keep-alive timer in a Web Worker made
# from a blob: URL (its `worker-timers`, so a background tab's throttled timers do not miss a
# ping and drop the connection). Only that page may start a worker, from itself or such a blob;
# scripts, connections and the rest stay as strict as everywhere else.
CLIENT_POLICY = f"{POLICY}; worker-src 'self' blob:"
DOCS_POLICY = POLICY.replace("script-src 'self'", "script-src 'self' 'unsafe-inline'").replace(
    "style-src 'self'", "style-src 'self' 'unsafe-inline'"
)


class SecurityHeadersMiddleware:
    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        relaxed = request.path.startswith(("/api/docs", "/admin/"))
        if relaxed:
            policy = DOCS_POLICY
        elif request.path == "/client/":
            policy = CLIENT_POLICY
        else:
            policy = POLICY
        response.headers.setdefault("Content-Security-Policy", policy)
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("Cross-Origin-Opener-Policy", "same-origin")
        return response

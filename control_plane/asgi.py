"""ASGI entry point: Django over HTTP, Channels consumers over WebSocket (live portal views)."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control_plane.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import path  # noqa: E402

from control_plane.health import with_healthz  # noqa: E402
from control_plane.web_metrics import serve_from_environment  # noqa: E402
from tenants.portal.live import LiveConsumer  # noqa: E402

serve_from_environment()
websocket_urlpatterns: list = [path("ws/live/", LiveConsumer.as_asgi())]

application = ProtocolTypeRouter(
    {
        "http": with_healthz(django_asgi_app),
        "websocket": AllowedHostsOriginValidator(
            AuthMiddlewareStack(URLRouter(websocket_urlpatterns))
        ),
    }
)

"""The Swagger UI page at /api/docs/ (drf-spectacular's), with a way back to the portal."""

from __future__ import annotations

from drf_spectacular.views import SpectacularSwaggerView


class ApiDocsView(SpectacularSwaggerView):
    template_name = "api/docs.html"
    title = "API reference · MQTT platform"

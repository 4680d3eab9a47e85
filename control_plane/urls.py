from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView

from tenants.api.docs_page import ApiDocsView
from tenants.jobs.artifact_download import artifact_download

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", ApiDocsView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/v1/", include("tenants.api.urls")),
    # Job artifacts for devices, by a signed, short-lived URL (common.jobs.artifacts).
    path("artifacts/<str:tenant>/<str:name>", artifact_download, name="artifact-download"),
    path("", include("tenants.portal.urls")),
]

# Product pages (the JSON error envelope under /api/), never Django's debug or bare ones.
handler400 = "tenants.portal.error_pages.bad_request"
handler403 = "tenants.portal.error_pages.permission_denied"
handler404 = "tenants.portal.error_pages.page_not_found"
handler500 = "tenants.portal.error_pages.server_error"

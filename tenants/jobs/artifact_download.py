"""The web process's side of the embedded store's artifact URLs (`common.jobs.artifacts`): a
device GETs `/artifacts/{tenant}/{name}?expires=E&signature=S`, with no other credential, as it
would an S3 presigned URL. An expired, tampered or unsigned URL is a 403 (S3's answer), and the
signature covers the tenant and the name, so no URL reaches another tenant's file."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.views.decorators.http import require_safe

from common.jobs.artifacts import object_key, verify
from common.security.service_token import load_key
from common.stores.object_store import ObjectNotFound, open_object_store
from tenants.jobs.selectors import artifact_by_slug


@require_safe
def artifact_download(request: HttpRequest, tenant: str, name: str) -> HttpResponse:
    expires = request.GET.get("expires", "")
    given = request.GET.get("signature", "")
    if not verify(load_key(), tenant, name, expires, given):
        return HttpResponseForbidden(
            "This artifact URL is expired or not signed for it.", content_type="text/plain"
        )
    artifact = artifact_by_slug(slug=tenant, name=name)
    try:
        data = open_object_store().get(object_key(artifact.tenant.slug, artifact.name))
    except ObjectNotFound:
        return HttpResponse("The artifact is gone.", status=404, content_type="text/plain")
    response = HttpResponse(data, content_type=artifact.content_type or "application/octet-stream")
    response["Content-Disposition"] = f'attachment; filename="{artifact.name}"'
    response["ETag"] = f'"{artifact.sha256}"'
    response["Cache-Control"] = "private, no-store"
    return response

"""REST API for job artifacts (files devices fetch for a job, such as firmware): upload, list,
show, delete. The work is in `tenants.jobs.artifacts` (writes) and `tenants.jobs.selectors`
(reads); an artifact is looked up in the caller's tenant only (another tenant's is a 404)."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, parsers, serializers, status
from rest_framework.response import Response

from common.jobs.artifacts import TARGET_PREFIX
from tenants.api.job_views import Conflict
from tenants.api.views import TenantAPIView, text_param
from tenants.jobs import artifacts as job_artifacts
from tenants.jobs import selectors as job_selectors


class TooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_code = "too_large"
    default_detail = "Too large."


class RawBodyParser(parsers.BaseParser):
    """Any body that is not a form: the file itself (`?name=` names it), read up to the
    limit and one byte more (so an upload over it is told, not truncated)."""

    media_type = "*/*"

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.JOB_ARTIFACT_MAX_BYTES
        return stream.read(limit + 1) if stream is not None else b""


class ArtifactOutput(serializers.Serializer):
    name = serializers.CharField()
    size = serializers.IntegerField(help_text="bytes")
    sha256 = serializers.CharField()
    content_type = serializers.CharField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    placeholder = serializers.SerializerMethodField(
        help_text="what a job document writes for a short-lived URL of this file"
    )

    def get_placeholder(self, artifact) -> str:
        return "${aws:iot:s3-presigned-url:" + TARGET_PREFIX + artifact.name + "}"


def _upload(request) -> tuple[str, bytes, str]:
    """(name, bytes, content type) of a multipart `file` (named by `name` or its file name),
    or of a raw body named by `?name=`."""
    limit = settings.JOB_ARTIFACT_MAX_BYTES
    too_large = TooLarge(f"An artifact is at most {limit} bytes (JOB_ARTIFACT_MAX_BYTES).")
    data = request.data
    if isinstance(data, bytes):
        body = data
        if len(body) > limit:
            raise too_large
        name = text_param(request, "name") or ""
        return name, body, request.content_type.split(";")[0].strip()
    upload = request.FILES.get("file")
    if upload is None:
        raise exceptions.ValidationError(
            {"file": ["Send the file as multipart `file`, or as the raw body with ?name=."]}
        )
    if upload.size > limit:
        raise too_large
    name = data.get("name") or text_param(request, "name") or upload.name or ""
    return str(name), upload.read(), upload.content_type or ""


class ArtifactListView(TenantAPIView):
    parser_classes = [parsers.MultiPartParser, RawBodyParser]

    @extend_schema(responses=ArtifactOutput(many=True), operation_id="v1_job_artifacts_list")
    def get(self, request):
        artifacts = job_selectors.artifact_list(tenant=self.tenant)
        return Response(ArtifactOutput(artifacts, many=True).data)

    @extend_schema(
        request={"multipart/form-data": None, "application/octet-stream": None},
        parameters=[OpenApiParameter("name", str, description="the artifact's name (raw body)")],
        responses={201: ArtifactOutput},
    )
    def post(self, request):
        name, body, content_type = _upload(request)
        actor = getattr(request.user, "email", "") or str(request.user)
        try:
            artifact = job_artifacts.artifact_upload(
                tenant=self.tenant, name=name, data=body, content_type=content_type, actor=actor
            )
        except job_artifacts.ArtifactConflict as error:
            raise Conflict(str(error)) from None
        return Response(ArtifactOutput(artifact).data, status=status.HTTP_201_CREATED)


class ArtifactDetailView(TenantAPIView):
    @extend_schema(responses=ArtifactOutput)
    def get(self, request, name: str):
        return Response(
            ArtifactOutput(job_selectors.artifact_get(tenant=self.tenant, name=name)).data
        )

    @extend_schema(responses={204: None})
    def delete(self, request, name: str):
        artifact = job_selectors.artifact_get(tenant=self.tenant, name=name)
        try:
            job_artifacts.artifact_delete(artifact=artifact)
        except job_artifacts.ArtifactConflict as error:
            raise Conflict(str(error)) from None
        return Response(status=status.HTTP_204_NO_CONTENT)

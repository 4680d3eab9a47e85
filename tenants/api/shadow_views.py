"""REST API for device shadows, AWS IoT's GetThingShadow / UpdateThingShadow / DeleteThingShadow
on a device of the tenant: `/devices/{name}/shadow` (the classic shadow) and
`/devices/{name}/shadows/{shadow}` (named ones), their `…/history`, and the list of named shadows.

Bodies are AWS's documents (`common.shadow.document`); `ETag` is the shadow's version and
`If-Match` makes a change conditional on it (412 when the shadow moved on). A refused request
answers AWS's HTTP code with this API's error shape and AWS's own error document under `aws`.
Thin, as the other views: the work is in `tenants.shadows.services` and `tenants.shadows.selectors`.
"""

from __future__ import annotations

import re
import time

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from common.shadow import document as doc
from common.shadow.topics import SHADOW_NAME
from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.views import TenantAPIView, paginated
from tenants.shadows import selectors as shadow_selectors
from tenants.shadows import services as shadow_services

ERROR_CODES = {
    400: "invalid",
    403: "quota_exceeded",
    404: "not_found",
    409: "version_conflict",
    413: "too_large",
    415: "unsupported_encoding",
}
IF_MATCH = OpenApiParameter(
    "If-Match",
    str,
    OpenApiParameter.HEADER,
    description="the shadow's version (its ETag): the change is made only if it is still that",
)
UPDATE_EXAMPLE = OpenApiExample(
    "desired state", value={"state": {"desired": {"color": "red"}}, "clientToken": "app-1"}
)


class ShadowDocumentOutput(serializers.Serializer):
    state = serializers.JSONField(help_text="desired, reported and (when they differ) delta")
    metadata = serializers.JSONField(help_text="a timestamp per field")
    version = serializers.IntegerField()
    timestamp = serializers.IntegerField(help_text="epoch seconds")


class ShadowAcceptedOutput(serializers.Serializer):
    state = serializers.JSONField(allow_null=True, help_text="the request's state")
    metadata = serializers.JSONField(required=False, help_text="timestamps of its fields")
    version = serializers.IntegerField()
    timestamp = serializers.IntegerField()
    clientToken = serializers.CharField(required=False)  # noqa: N815 (AWS's name)


class ShadowNameOutput(serializers.Serializer):
    name = serializers.CharField()
    version = serializers.IntegerField()
    updated_at = serializers.DateTimeField()


class ShadowVersionOutput(serializers.Serializer):
    version = serializers.IntegerField()
    operation = serializers.CharField(help_text="update | delete")
    state = serializers.JSONField(help_text="the shadow's state after it")
    metadata = serializers.JSONField()
    request = serializers.JSONField(allow_null=True, help_text="the update's state node")
    client_token = serializers.CharField()
    actor = serializers.CharField(help_text="the client id, or the member, that made it")
    via = serializers.CharField(help_text="mqtt | api")
    created_at = serializers.DateTimeField()


def if_match(request) -> int | None:
    """The version `If-Match` names (`"7"`, `7`, `W/"7"`; `*` names none), or 400."""
    value = request.headers.get("If-Match")
    if value is None or value.strip() == "*":
        return None
    found = re.fullmatch(r'\s*(?:W/)?"?(\d{1,18})"?\s*', value)
    if found is None:
        raise ValidationError({"If-Match": ["Must be the shadow's version, as its ETag gives it."]})
    return int(found.group(1))


def refused(error: doc.ShadowError) -> Response:
    body = {
        "error": {
            "code": ERROR_CODES.get(error.code, "error"),
            "message": error.message,
            "aws": doc.error_document(error, int(time.time())),
        }
    }
    return Response(body, status=error.code)


def precondition_failed(error: shadow_services.PreconditionFailed) -> Response:
    message = f"If-Match: {error}; read it again and retry"
    return Response({"error": {"code": "precondition_failed", "message": message}}, status=412)


def tagged(body: dict, version: int) -> Response:
    response = Response(body)
    response["ETag"] = f'"{version}"'
    return response


def shadow_name(kwargs) -> str:
    """The path's shadow: "" for the classic one; a name no shadow can have is a 404."""
    name = kwargs.get("shadow", "")
    if name and not SHADOW_NAME.match(name):
        raise Http404("No such shadow: names are 1-64 letters, digits, ':', '_' or '-'.")
    return name


class ShadowView(TenantAPIView):
    """GET, POST (update) and DELETE of one shadow: the classic one (`shadow` absent from the
    path) or a named one."""

    def actor(self, request) -> str:
        return f"api:{getattr(request.user, 'email', '') or request.user}"

    @extend_schema(responses={200: ShadowDocumentOutput}, operation_id=None)
    def get(self, request, name: str, **kwargs):
        device = shadow_selectors.device_get(tenant=self.tenant, name=name)
        body, version = shadow_selectors.shadow_document(device=device, name=shadow_name(kwargs))
        return tagged(body, version)

    @extend_schema(
        request={"application/json": OpenApiTypes.OBJECT},
        parameters=[IF_MATCH],
        responses={200: ShadowAcceptedOutput},
        examples=[UPDATE_EXAMPLE],
        description="AWS's UpdateThingShadow: merge `state` (`null` deletes a field); a "
        "`version` in the body, or `If-Match`, makes it conditional (409, 412). Devices are sent "
        "`…/update/accepted`, `/delta` and `/documents` on MQTT as for their own update.",
    )
    def post(self, request, name: str, **kwargs):
        device = shadow_selectors.device_get(tenant=self.tenant, name=name)
        shadow = shadow_name(kwargs)
        try:
            change = shadow_services.shadow_update(
                device=device,
                name=shadow,
                payload=request.body,
                if_match=if_match(request),
                actor=self.actor(request),
            )
        except doc.ShadowError as error:
            return refused(error)
        except shadow_services.PreconditionFailed as error:
            return precondition_failed(error)
        return tagged(change.body, change.version)

    @extend_schema(
        parameters=[IF_MATCH],
        responses={200: ShadowAcceptedOutput},
        description="AWS's DeleteThingShadow: the version is kept (a shadow made again under "
        "this name goes on from it); devices are sent `…/delete/accepted`.",
    )
    def delete(self, request, name: str, **kwargs):
        device = shadow_selectors.device_get(tenant=self.tenant, name=name)
        try:
            change = shadow_services.shadow_delete(
                device=device,
                name=shadow_name(kwargs),
                if_match=if_match(request),
                actor=self.actor(request),
            )
        except doc.ShadowError as error:
            return refused(error)
        except shadow_services.PreconditionFailed as error:
            return precondition_failed(error)
        return tagged(change.body, change.version)


class ShadowHistoryView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(ShadowVersionOutput),
        description="The shadow's past versions, newest first, kept for the plan's "
        "`shadow_history_days`.",
    )
    def get(self, request, name: str, **kwargs):
        device = shadow_selectors.device_get(tenant=self.tenant, name=name)
        rows = shadow_selectors.shadow_history(device=device, name=shadow_name(kwargs))
        return paginated(self, request, rows, ShadowVersionOutput)


class NamedShadowListView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(ShadowNameOutput),
        description="AWS's ListNamedShadowsForThing: the device's named shadows that exist.",
        operation_id="v1_devices_shadows_list",  # beside …/shadows/{shadow}'s retrieve
    )
    def get(self, request, name: str):
        device = shadow_selectors.device_get(tenant=self.tenant, name=name)
        return paginated(
            self, request, shadow_selectors.shadow_names(device=device), ShadowNameOutput
        )

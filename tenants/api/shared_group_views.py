"""REST API of the tenant's durable shared groups (issue 45): list them with what they hold, and
delete one with its messages. Thin: `tenants.shared_groups.selectors` reads,
`tenants.shared_groups.services` writes; another tenant's group is a 404, as a missing one is."""

from __future__ import annotations

from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.views import TenantAPIView, paginated
from tenants.inspection import selectors as inspection
from tenants.shared_groups import selectors as shared_group_selectors
from tenants.shared_groups import services as shared_group_services


class SharedGroupOutput(serializers.Serializer):
    group = serializers.CharField(source="name", help_text="the group's name")
    filter = serializers.CharField(source="topic_filter", help_text="its topic filter")
    depth = serializers.IntegerField(help_text="messages it holds for its members")
    oldest_at = serializers.DateTimeField(
        allow_null=True, help_text="when the oldest message it holds came; null when none"
    )
    members = serializers.IntegerField(help_text="members subscribed, as its broker last counted")
    expires_at = serializers.DateTimeField(
        allow_null=True,
        help_text="without members: when it goes with its messages (group_retention); null "
        "while it has members",
    )
    created_at = serializers.DateTimeField()


FILTER = OpenApiParameter(
    "filter",
    OpenApiTypes.STR,
    description="the group's topic filter (`$share/{group}/{filter}`), e.g. `sensors/#`",
    required=True,
)


def filter_param(request) -> str:
    """The `filter` parameter as a valid topic filter, else a 400 naming the problem."""
    try:
        return inspection.topic_filter_checked(request.query_params.get("filter"), default=None)
    except inspection.TopicFilterRefused as error:
        raise ValidationError({"filter": [str(error)]}) from None


class SharedGroupListView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(SharedGroupOutput),
        operation_id="v1_shared_groups_list",
    )
    def get(self, request):
        rows = shared_group_selectors.shared_groups_list(tenant=self.tenant)
        return paginated(self, request, rows, SharedGroupOutput)


class SharedGroupDetailView(TenantAPIView):
    @extend_schema(
        parameters=[FILTER], responses={204: None}, operation_id="v1_shared_groups_delete"
    )
    def delete(self, request, group: str):
        topic_filter = filter_param(request)
        deleted = shared_group_services.shared_group_delete(
            tenant=self.tenant, name=group, topic_filter=topic_filter
        )
        if not deleted:
            raise Http404(f"No shared group {group[:256]!r} on the filter {topic_filter!r}.")
        return Response(status=status.HTTP_204_NO_CONTENT)

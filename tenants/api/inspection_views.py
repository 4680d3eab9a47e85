"""REST API for inspecting what the broker holds for the tenant (issue 30, point 4): sessions, a
session's queue, retained messages (and deleting them), the topic tree. Thin, as the others:
the reads are `tenants.inspection.selectors`, the one write `tenants.inspection.services`.
Not metered: reading these costs the tenant nothing."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.views import TenantAPIView, paginated, text_param
from tenants.inspection import selectors as inspection
from tenants.inspection import services as inspection_services

# -- output shapes ----------------------------------------------------------------------------


class PayloadFields(serializers.Serializer):
    """A payload preview's fields, flat in the row that has it."""

    payload_preview = serializers.CharField(
        source="payload.text",
        help_text="the payload as JSON, text or hex (bytes separated by spaces), at most 1 KiB "
        "of it",
    )
    payload_encoding = serializers.ChoiceField(
        source="payload.encoding",
        choices=["json", "text", "hex", "empty", "stored"],
        help_text="how `payload_preview` shows it; `stored`: a large payload kept in the "
        "object store, not previewed",
    )
    payload_truncated = serializers.BooleanField(
        source="payload.truncated", help_text="the preview shows only the start of the payload"
    )


class SessionOutput(serializers.Serializer):
    client_id = serializers.CharField()
    online = serializers.BooleanField()
    node = serializers.CharField(
        allow_null=True, help_text="the broker node holding its connection; null offline"
    )
    clean_start = serializers.BooleanField(
        allow_null=True, help_text="as the client connected; null offline"
    )
    expiry = serializers.IntegerField(
        help_text="session expiry interval in seconds (0: ends with its connection; "
        "4294967295: never)"
    )
    expires_at = serializers.DateTimeField(
        allow_null=True, help_text="offline: when the session ends; null online or never"
    )
    subscription_count = serializers.IntegerField()
    queued = serializers.IntegerField(help_text="deliveries waiting for the client")
    inflight = serializers.IntegerField(help_text="deliveries sent, not yet acknowledged")
    connected_at = serializers.DateTimeField(allow_null=True)
    device = serializers.CharField(allow_null=True, help_text="the device connected; null offline")


class SubscriptionOutput(serializers.Serializer):
    filter = serializers.CharField()
    qos = serializers.IntegerField()
    no_local = serializers.BooleanField(allow_null=True)
    retain_as_published = serializers.BooleanField(allow_null=True)
    retain_handling = serializers.IntegerField(allow_null=True)
    subscription_id = serializers.IntegerField(allow_null=True)


class SessionDetailOutput(SessionOutput):
    persistent = serializers.BooleanField(help_text="it outlives its connection (expiry > 0)")
    subscriptions = SubscriptionOutput(many=True)
    address = serializers.CharField(allow_null=True)
    protocol_version = serializers.IntegerField(allow_null=True)
    transport = serializers.CharField(allow_null=True)


class QueuedOutput(PayloadFields):
    seq = serializers.IntegerField(help_text="its place in the session's queue")
    topic = serializers.CharField()
    qos = serializers.IntegerField()
    retain = serializers.BooleanField()
    state = serializers.ChoiceField(
        choices=["queued", "sent", "released"],
        help_text="queued: waiting; sent: sent, not acknowledged; released: QoS 2, PUBREC "
        "received, PUBCOMP awaited",
    )
    size = serializers.IntegerField(allow_null=True, help_text="payload bytes")
    expires_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()


class RetainedOutput(PayloadFields):
    topic = serializers.CharField()
    qos = serializers.IntegerField()
    size = serializers.IntegerField(help_text="payload bytes")
    updated_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField(allow_null=True)


class RetainedDeletedOutput(serializers.Serializer):
    topic = serializers.CharField(help_text="the filter deleted by")
    deleted = serializers.IntegerField(help_text="retained messages deleted")


class TopicNodeOutput(serializers.Serializer):
    name = serializers.CharField(help_text="this level")
    topic = serializers.CharField(help_text="the path from the root")
    retained = serializers.BooleanField(help_text="a retained message is kept on this topic")
    subscriptions = serializers.IntegerField(help_text="sessions subscribed with this filter")
    messages_per_minute = serializers.FloatField(
        allow_null=True, help_text="published on it over the last minutes; null: not recorded"
    )
    children = serializers.ListField(child=serializers.DictField(), help_text="nodes below")


class TopicTreeOutput(serializers.Serializer):
    count = serializers.IntegerField(source="nodes", help_text="nodes in the tree")
    truncated = serializers.BooleanField(help_text="the tree was cut: ask a narrower filter")
    results = TopicNodeOutput(many=True, source="roots")


# -- parameters -------------------------------------------------------------------------------

TOPIC_FILTER = OpenApiParameter(
    "topic",
    OpenApiTypes.STR,
    description="an MQTT topic filter (`+` one level, `#` the rest); default `#` (every topic "
    "but those starting with `$`)",
    required=False,
)


def topic_filter(request, *, required: bool = False) -> str:
    """The `topic` parameter as a valid topic filter, else a 400 naming the problem."""
    try:
        return inspection.topic_filter_checked(
            request.query_params.get("topic"), default=None if required else "#"
        )
    except inspection.TopicFilterRefused as error:
        raise ValidationError({"topic": [str(error)]}) from None


def online_param(request) -> bool | None:
    raw = request.query_params.get("online")
    if raw in (None, ""):
        return None
    if raw not in ("true", "false"):
        raise ValidationError({"online": [f"Must be true or false, got {raw[:32]!r}."]})
    return raw == "true"


# -- views ------------------------------------------------------------------------------------


class SessionListView(TenantAPIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("client", str, description="filter: client id contains"),
            OpenApiParameter("online", bool, description="filter: only online (true) or offline"),
            *PAGE_PARAMETERS,
        ],
        responses=page_of(SessionOutput),
        operation_id="v1_sessions_list",
    )
    def get(self, request):
        rows = inspection.sessions_list(
            tenant=self.tenant, client=text_param(request, "client"), online=online_param(request)
        )
        return paginated(self, request, rows, SessionOutput)


class SessionDetailView(TenantAPIView):
    @extend_schema(responses=SessionDetailOutput)
    def get(self, request, client_id: str):
        row = inspection.session_get(tenant=self.tenant, client_id=client_id)
        return Response(SessionDetailOutput(row).data)


class SessionQueueView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(QueuedOutput),
        operation_id="v1_sessions_queue_list",
    )
    def get(self, request, client_id: str):
        rows = inspection.session_queue(tenant=self.tenant, client_id=client_id)
        return paginated(self, request, rows, QueuedOutput)


class RetainedView(TenantAPIView):
    @extend_schema(
        parameters=[TOPIC_FILTER, *PAGE_PARAMETERS],
        responses=page_of(RetainedOutput),
        operation_id="v1_retained_list",
    )
    def get(self, request):
        rows = inspection.retained_list(tenant=self.tenant, topic_filter=topic_filter(request))
        return paginated(self, request, rows, RetainedOutput)

    @extend_schema(
        parameters=[
            OpenApiParameter(
                "topic",
                OpenApiTypes.STR,
                description="the topic, or a filter with `+`/`#`, whose retained messages go",
                required=True,
            )
        ],
        responses=RetainedDeletedOutput,
        operation_id="v1_retained_delete",
    )
    def delete(self, request):
        wanted = topic_filter(request, required=True)
        deleted = inspection_services.retained_delete(tenant=self.tenant, topic_filter=wanted)
        return Response(RetainedDeletedOutput({"topic": wanted, "deleted": deleted}).data)


class TopicTreeView(TenantAPIView):
    @extend_schema(parameters=[TOPIC_FILTER], responses=TopicTreeOutput)
    def get(self, request):
        tree = inspection.topics_tree(tenant=self.tenant, topic_filter=topic_filter(request))
        return Response(TopicTreeOutput(tree).data)

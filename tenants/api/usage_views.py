"""REST API for usage a tenant can read before the bill (issue 33, point 1): what a message of a
given shape costs (`/usage/explain`, answered by the broker's own metering rules,
`common.charges.metering`) and where the month lands (`/usage/forecast`). Per-device rows are
`GET /usage?by=device` (`views.UsageView`). Thin: the reads are `tenants.usage.selectors`."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from common.charges.metering import explain_publish
from tenants.api.views import TenantAPIView
from tenants.usage import selectors as usage_selectors

MAX_PACKET_BYTES = 268_435_455  # the largest MQTT packet (a 4-byte remaining length)


class ExplainInput(serializers.Serializer):
    size = serializers.IntegerField(
        min_value=0, max_value=MAX_PACKET_BYTES, help_text="payload bytes"
    )
    qos = serializers.ChoiceField(choices=[0, 1, 2], default=0)
    retain = serializers.BooleanField(default=False)
    properties_bytes = serializers.IntegerField(
        min_value=0,
        max_value=MAX_PACKET_BYTES,
        default=0,
        help_text="MQTT 5 properties as encoded (user properties, response topic, correlation "
        "data, content type, …), without the block's length",
    )
    topic = serializers.CharField(
        required=False, allow_blank=True, max_length=65_535, trim_whitespace=False
    )
    subscribers = serializers.IntegerField(
        min_value=0, max_value=1_000_000, default=0, help_text="copies delivered"
    )


EXPLAIN_PARAMETERS = [
    OpenApiParameter("size", int, required=True, description="payload bytes"),
    OpenApiParameter("qos", int, enum=[0, 1, 2]),
    OpenApiParameter("retain", bool),
    OpenApiParameter("properties_bytes", int, description="MQTT 5 properties bytes"),
    OpenApiParameter("topic", str, description="the topic (its UTF-8 bytes count)"),
    OpenApiParameter("subscribers", int, description="deliveries to subscribers (default 0)"),
]


class UsageExplainView(TenantAPIView):
    """How many billed units one PUBLISH of this shape costs, and why, by the broker's rules."""

    @extend_schema(
        parameters=EXPLAIN_PARAMETERS,
        responses=OpenApiTypes.OBJECT,
        operation_id="v1_usage_explain",
    )
    def get(self, request):
        serializer = ExplainInput(data=request.query_params)
        serializer.is_valid(raise_exception=True)
        shape = serializer.validated_data
        explanation = explain_publish(
            payload=shape["size"],
            topic=len(shape.get("topic", "").encode("utf-8", "surrogatepass")),
            properties=shape["properties_bytes"],
            qos=int(shape["qos"]),
            retain=shape["retain"],
            deliveries=shape["subscribers"],
        )
        return Response(explanation.as_document())


class UsageForecastView(TenantAPIView):
    """This month so far and the forecast to its end, per billed dimension, in units and money."""

    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="v1_usage_forecast")
    def get(self, request):
        return Response(usage_selectors.usage_forecast(tenant=self.tenant))

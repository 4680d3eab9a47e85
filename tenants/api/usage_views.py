"""REST API for usage a tenant can read before the bill: the quota and how often each limit
slowed or refused something (`/quota`), usage by the minute or as a series per hour or day, with
per-device or per-group rows (`/usage`, `?by=device|group`), what a message of a given shape
costs (`/usage/explain`, answered by the broker's own metering rules,
`common.charges.metering`, issue 33, point 1) and where the month lands (`/usage/forecast`).
Thin: the reads are `tenants.usage.selectors` and `tenants.billing.selectors`."""

from __future__ import annotations

from datetime import UTC

from django.core.exceptions import ValidationError
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from common.charges.metering import explain_publish
from tenants.api import usage_serializers as s
from tenants.api.pagination import PAGE_PARAMETERS
from tenants.api.views import TenantAPIView, paginated, text_param
from tenants.billing import selectors as billing_selectors
from tenants.tenant import selectors as tenant_selectors
from tenants.usage import selectors as usage_selectors
from tenants.usage.throttling import figures as throttling_body
from tenants.usage.throttling import limit_activity

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


class QuotaView(TenantAPIView):
    @extend_schema(responses=s.QuotaOutput)
    def get(self, request):
        limits = tenant_selectors.effective_quota(self.tenant)
        body = {
            "plan": self.tenant.plan.slug,
            "limits": limits,
            "overrides": self.tenant.quota_overrides or {},
            "throttling": throttling_body(limit_activity(tenant=self.tenant), limits),
        }
        return Response(s.QuotaOutput(body).data)


# `GET /usage?by=…`: what each adds beside the series (`rows` per UTC day, and totals).
BY_SELECTORS = {"device": usage_selectors.device_usage, "group": usage_selectors.group_usage}


class UsageView(TenantAPIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("from", str, description="ISO 8601 start (with granularity)"),
            OpenApiParameter("to", str, description="ISO 8601 end, exclusive (default now)"),
            OpenApiParameter("granularity", str, enum=["hour", "day"]),
            OpenApiParameter(
                "by",
                str,
                enum=["device", "group"],
                description="adds per-device (or per-device-group) rows, per UTC day, and totals",
            ),
            OpenApiParameter("since", str, description="ISO 8601: raw minutes from then"),
            *PAGE_PARAMETERS,
        ],
        responses=s.UsageResponse,
        operation_id="v1_usage_list",
    )
    def get(self, request):
        params = request.query_params
        if {"from", "to", "granularity", "by"} & set(params):
            return self._series(params)
        since, parsed = text_param(request, "since"), None
        if since:
            try:
                parsed = parse_datetime(since)
                if parsed is not None and parsed.tzinfo is not None:
                    parsed.astimezone(UTC)  # out of range once in UTC (year 9999, -23:59)
            except (ValueError, OverflowError):
                parsed = None
            if parsed is None:
                raise ValidationError({"since": ["Use a valid ISO 8601 date-time."]})
        usage = usage_selectors.usage_list(tenant=self.tenant, since=parsed)
        return paginated(self, request, usage, s.UsageOutput)

    def _series(self, params) -> Response:
        granularity = params.get("granularity", "day")
        by = params.get("by")
        if by is not None and by not in BY_SELECTORS:
            raise ValidationError(
                {"by": ["Use device or group (per-device or per-group rows, per UTC day)."]}
            )
        now = timezone.now()
        bounds = {}
        for name, default in (("from", None), ("to", now)):
            raw = params.get(name)
            if raw is not None and ("\x00" in raw or len(raw) > 64):
                raise ValidationError({name: ["Use an ISO 8601 date or date-time."]})
            if raw is None:
                if default is None:
                    raise ValidationError({name: ["Required with `to` or `granularity`."]})
                bounds[name] = default
                continue
            try:
                parsed = parse_datetime(raw) or _parse_date(raw)
                if parsed is not None and parsed.tzinfo is not None:
                    parsed.astimezone(UTC)  # out of range once in UTC
            except (ValueError, OverflowError):
                parsed = None
            if parsed is None:
                raise ValidationError({name: ["Use an ISO 8601 date or date-time."]})
            if timezone.is_naive(parsed):
                parsed = timezone.make_aware(parsed, UTC)
            bounds[name] = parsed
        series = billing_selectors.usage_series(
            tenant=self.tenant, start=bounds["from"], end=bounds["to"], granularity=granularity
        )
        body = {
            "from": bounds["from"].isoformat(),
            "to": bounds["to"].isoformat(),
            "granularity": granularity,
            "series": series,
        }
        if by is not None:
            body.update(
                BY_SELECTORS[by](tenant=self.tenant, start=bounds["from"], end=bounds["to"])
            )
        return Response(body)


def _parse_date(raw: str):
    from datetime import datetime

    try:
        return datetime.strptime(raw, "%Y-%m-%d")
    except ValueError:
        return None

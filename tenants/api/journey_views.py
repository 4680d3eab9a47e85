"""REST API of the journey: `GET /journey` (what happened to the tenant's messages) and
`GET /clients/{client_id}/events` (a client's life). Thin: `tenants.journey.selectors` reads."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from common.journey.schema import OUTCOMES
from tenants.api.views import TenantAPIView, text_param
from tenants.journey.selectors import JourneyQueryError, JourneyReader, Page, parse_time, window
from tenants.journey.words import describe_event, describe_outcome
from tenants.time_display import utc_iso

MAX_LIMIT = 1000
DEFAULT_LIMIT = 100


class UtcMilliseconds(serializers.DateTimeField):
    """`2026-11-27T14:02:03.120Z`: every journey time to the millisecond, the width fixed, so
    that the times sort as strings too (DRF's default drops a zero fraction: `…:03Z` sorts after
    `…:03.120Z`)."""

    def to_representation(self, value: datetime) -> str:
        return utc_iso(value)


class JourneyRowOutput(serializers.Serializer):
    time = UtcMilliseconds()
    client_id = serializers.CharField(allow_null=True)
    topic = serializers.CharField(allow_null=True)
    qos = serializers.IntegerField(allow_null=True)
    size = serializers.IntegerField(allow_null=True)
    packet_id = serializers.IntegerField(allow_null=True)
    outcome = serializers.ChoiceField(choices=OUTCOMES)
    sessions = serializers.IntegerField(allow_null=True)
    queued = serializers.IntegerField(allow_null=True)
    quota = serializers.CharField(allow_null=True)
    subscriber = serializers.CharField(allow_null=True, help_text="a later outcome's subscriber")
    reason_code = serializers.IntegerField(allow_null=True)
    reason_code_text = serializers.CharField(allow_null=True, help_text="e.g. 0x97 Quota exceeded")
    reason = serializers.CharField(help_text="what happened, in words")
    node = serializers.CharField(allow_null=True)
    latency_ms = serializers.IntegerField(
        allow_null=True,
        required=False,
        help_text="a rule's row: milliseconds from the publish to the match or the action done",
    )


class ClientEventOutput(serializers.Serializer):
    time = UtcMilliseconds()
    event = serializers.CharField()
    version = serializers.IntegerField(help_text="grows with every event of the client")
    reason_code = serializers.IntegerField(allow_null=True)
    reason_code_text = serializers.CharField(allow_null=True)
    reason = serializers.CharField(allow_null=True)
    initiator = serializers.CharField(allow_null=True)
    detail = serializers.CharField(allow_null=True)
    node = serializers.CharField(allow_null=True, help_text="the broker that recorded it")
    from_node = serializers.CharField(
        allow_null=True, help_text="connected: the node its session was taken over from"
    )
    to_node = serializers.CharField(
        allow_null=True, help_text="taken_over: the node of the connection that took it"
    )


class _JourneyPage(serializers.Serializer):
    next = serializers.URLField(allow_null=True)


class JourneyPageOutput(_JourneyPage):
    results = JourneyRowOutput(many=True)


class ClientEventsPageOutput(_JourneyPage):
    results = ClientEventOutput(many=True)


TIME_PARAMETERS = [
    OpenApiParameter("from", str, description="ISO 8601 start (default: 24 hours before `to`)"),
    OpenApiParameter("to", str, description="ISO 8601 end, exclusive (default: now)"),
    OpenApiParameter("limit", int, description=f"rows per page (at most {MAX_LIMIT})"),
    OpenApiParameter("cursor", str, description="the `next` link's cursor: older rows"),
]


class _JourneyView(TenantAPIView):
    def _query(self, request) -> dict[str, Any]:
        limit_raw = request.query_params.get("limit") or str(DEFAULT_LIMIT)
        if not limit_raw.isdigit() or not 1 <= int(limit_raw) <= MAX_LIMIT:
            raise ValidationError({"limit": [f"Must be a whole number from 1 to {MAX_LIMIT}."]})
        start, end = window(
            parse_time(text_param(request, "from"), "from"),
            parse_time(text_param(request, "to"), "to"),
        )
        return {
            "start": start,
            "end": end,
            "limit": int(limit_raw),
            "cursor": text_param(request, "cursor"),
        }

    def _respond(self, request, page: Page, describe) -> Response:
        next_url = None
        if page.cursor:
            params = request.query_params.copy()
            params["cursor"] = page.cursor
            next_url = request.build_absolute_uri(request.path) + "?" + urlencode(params)
        return Response({"next": next_url, "results": [describe(row) for row in page.rows]})

    def handle_exception(self, exc):
        if isinstance(exc, JourneyQueryError):
            exc = ValidationError({exc.field: [str(exc)]})
        return super().handle_exception(exc)


class JourneyView(_JourneyView):
    @extend_schema(
        parameters=[
            OpenApiParameter("topic", str, description="a topic filter (`+` and `#` allowed)"),
            OpenApiParameter("client", str, description="the publisher's client id"),
            OpenApiParameter(
                "outcome", str, description=f"one or more, comma-separated: {', '.join(OUTCOMES)}"
            ),
            *TIME_PARAMETERS,
        ],
        responses=JourneyPageOutput,
        operation_id="v1_journey_list",
    )
    def get(self, request):
        query = self._query(request)
        page = JourneyReader().messages(
            self.tenant.slug,
            topic=text_param(request, "topic"),
            client=text_param(request, "client"),
            outcome=text_param(request, "outcome"),
            **query,
        )
        return self._respond(request, page, describe_outcome)


class ClientEventsView(_JourneyView):
    @extend_schema(
        parameters=TIME_PARAMETERS,
        responses=ClientEventsPageOutput,
        operation_id="v1_client_events_list",
    )
    def get(self, request, client_id: str):
        if "\x00" in client_id or len(client_id) > 256:
            raise ValidationError({"client_id": ["Must be at most 256 characters, without NUL."]})
        page = JourneyReader().client_events(self.tenant.slug, client_id, **self._query(request))
        return self._respond(request, page, describe_event)

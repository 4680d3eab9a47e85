"""REST API of the tenant's sinks (issue 47): `GET /api/v1/sinks` lists every rule action of a
sink type with its state and outbox, and `POST /api/v1/rules/{name}/actions/{n}/test` tests one's
connection. Thin: `tenants.sinks.selectors` reads, `tenants.sinks.services` tests; another
tenant's rule is a 404, as a missing one is. A sink's settings are its rule's actions
(`/api/v1/rules`)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import exceptions, serializers
from rest_framework.response import Response

from common.contracts.rule_actions import SINK_TYPES
from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.views import TenantAPIView, paginated
from tenants.models.sinks import SINK_STATES
from tenants.rules import selectors as rule_selectors
from tenants.sinks import selectors as sink_selectors
from tenants.sinks import services as sink_services


class SinkOutput(serializers.Serializer):
    rule = serializers.CharField(help_text="the rule's name")
    action = serializers.IntegerField(help_text="the action's place in the rule, from 1")
    type = serializers.ChoiceField(list(SINK_TYPES), help_text="the sink's type")
    target = serializers.CharField(help_text="where it delivers, in words (no credential)")
    state = serializers.ChoiceField(
        list(SINK_STATES),
        help_text="ok (nothing waits after a failed attempt); retrying (outputs wait after a "
        "failed attempt); failing (one has failed three times or more)",
    )
    outbox_depth = serializers.IntegerField(help_text="outputs waiting in its outbox")
    oldest_at = serializers.DateTimeField(
        allow_null=True, help_text="when the oldest waiting output was queued; null when none"
    )
    last_error = serializers.CharField(help_text="the last error in words; empty when none")
    last_error_at = serializers.DateTimeField(allow_null=True)
    last_ok_at = serializers.DateTimeField(allow_null=True, help_text="when it last took an output")
    delivered = serializers.IntegerField(help_text="outputs it took")
    dead = serializers.IntegerField(help_text="outputs dead-lettered after every retry")
    lag_ms = serializers.IntegerField(
        allow_null=True,
        help_text="its last delivery: from the oldest output's message to the far end taking it",
    )
    resent = serializers.IntegerField(
        help_text="outputs delivered after a failed attempt: the far end may hold these twice "
        "(the most duplicates there can be)"
    )
    delivered_bytes = serializers.IntegerField(help_text="the delivered outputs' JSON bytes")
    last_minute = serializers.IntegerField(
        help_text="outputs delivered in the last whole clock minute (UTC): its throughput"
    )
    updated_at = serializers.DateTimeField(
        allow_null=True, help_text="when the rules job last wrote its state; null before"
    )


class SinkTestOutput(serializers.Serializer):
    ok = serializers.BooleanField(help_text="the far end took the connection and the settings")
    error = serializers.CharField(required=False, help_text="what went wrong, in words")


class SinkListView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS, responses=page_of(SinkOutput), operation_id="v1_sinks_list"
    )
    def get(self, request):
        rows = sink_selectors.sinks_list(tenant=self.tenant)
        return paginated(self, request, rows, SinkOutput)


class SinkTestView(TenantAPIView):
    @extend_schema(
        request=None,
        responses={200: SinkTestOutput, 429: OpenApiTypes.OBJECT},
        operation_id="v1_rule_action_test",
    )
    def post(self, request, name: str, number: int):
        rule = rule_selectors.rule_get(tenant=self.tenant, name=name)
        try:
            return Response(sink_services.sink_test(rule=rule, number=number))
        except sink_services.SinkTestThrottled as exc:
            raise exceptions.Throttled(wait=exc.wait, detail=str(exc)) from None

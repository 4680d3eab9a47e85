"""REST API for history: the tenant's history policies (`/history-policies`) and what its
archive keeps and stores (`/history`). Thin, as the others: shapes here, meaning in
`tenants.history.services`, reads in `tenants.history.selectors`."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.serializers import StrictInput
from tenants.api.views import TenantAPIView, paginated, validated
from tenants.history import selectors as history_selectors
from tenants.history import services as history_services


class HistoryPolicyInput(StrictInput):
    topic_filter = serializers.CharField(
        max_length=256, trim_whitespace=False, help_text="an MQTT topic filter (+ and # allowed)"
    )
    days = serializers.IntegerField(help_text="days kept, 1 to the plan's max_history_days")


class HistoryPolicyOutput(serializers.Serializer):
    id = serializers.IntegerField()
    topic_filter = serializers.CharField()
    days = serializers.IntegerField()
    created_at = serializers.DateTimeField()


class RuleFeedOutput(serializers.Serializer):
    rule = serializers.CharField()
    sources = serializers.ListField(child=serializers.CharField())


class HistoryOutput(serializers.Serializer):
    plan = serializers.CharField()
    default_days = serializers.IntegerField(
        help_text="days of every topic the plan keeps while the tenant has no policy"
    )
    default_applies = serializers.BooleanField()
    default_filter = serializers.CharField()
    max_days = serializers.IntegerField()
    max_policies = serializers.IntegerField()
    policies = serializers.IntegerField()
    archive_enabled = serializers.BooleanField()
    rules = RuleFeedOutput(many=True, help_text="enabled rules: their FROM is archived too")
    retention_days = serializers.IntegerField(help_text="history older than this is deleted")
    history_bytes = serializers.IntegerField(
        allow_null=True, help_text="compacted history in the archive now (null: store away)"
    )
    history_hours = serializers.IntegerField(allow_null=True)
    oldest_hour = serializers.DateTimeField(allow_null=True)
    stored_bytes = serializers.IntegerField(help_text="everything stored, at the last sample")
    stored_sampled_at = serializers.DateTimeField(allow_null=True)
    storage_gb_hours = serializers.FloatField(help_text="this month so far, as billed")
    storage_gb_months = serializers.FloatField()


class HistoryPolicyListView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(HistoryPolicyOutput),
        operation_id="v1_history_policies_list",
    )
    def get(self, request):
        policies = history_selectors.history_policies_list(tenant=self.tenant)
        return paginated(self, request, policies, HistoryPolicyOutput)

    @extend_schema(
        request=HistoryPolicyInput,
        responses={201: HistoryPolicyOutput},
        examples=[
            OpenApiExample(
                "a week of temperatures",
                request_only=True,
                value={"topic_filter": "sensors/+/temperature", "days": 7},
            )
        ],
    )
    def post(self, request):
        data = validated(HistoryPolicyInput, request.data)
        policy = history_services.history_policy_create(tenant=self.tenant, **data)
        return Response(HistoryPolicyOutput(policy).data, status=status.HTTP_201_CREATED)


class HistoryPolicyDetailView(TenantAPIView):
    @extend_schema(responses=HistoryPolicyOutput)
    def get(self, request, policy_id: int):
        policy = history_selectors.history_policy_get(tenant=self.tenant, policy_id=policy_id)
        return Response(HistoryPolicyOutput(policy).data)

    @extend_schema(responses={204: None})
    def delete(self, request, policy_id: int):
        policy = history_selectors.history_policy_get(tenant=self.tenant, policy_id=policy_id)
        history_services.history_policy_delete(policy)
        return Response(status=status.HTTP_204_NO_CONTENT)


class HistoryView(TenantAPIView):
    @extend_schema(responses=HistoryOutput, operation_id="v1_history_summary")
    def get(self, request):
        summary = history_selectors.history_summary(tenant=self.tenant)
        return Response(HistoryOutput(summary).data)

"""REST API of spend: `GET, PUT, DELETE /budget` (a monthly budget, its alerts and the spend
control), `GET /budget/alerts`, and `GET, PUT /billing-details` (who invoices are addressed to).
Thin: `tenants.budgets.services`, `tenants.billing.details` write; `tenants.budgets.selectors` reads."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiExample, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.views import TenantAPIView, paginated
from tenants.billing import details as billing_details
from tenants.budgets import selectors as budget_selectors
from tenants.budgets import services as budgets
from tenants.budgets.alerts import alert_words


class BudgetAlertOutput(serializers.Serializer):
    id = serializers.IntegerField()
    time = serializers.DateTimeField(source="created_at")
    period = serializers.CharField()
    kind = serializers.CharField(help_text="budget, max_connections or included_messages")
    threshold = serializers.IntegerField(help_text="percent")
    limit = serializers.IntegerField(help_text="the budget in cents, or the quota")
    value = serializers.IntegerField(help_text="spend in cents, or what was used, when crossed")
    currency = serializers.CharField(help_text="budget alerts: the budget's currency")
    message = serializers.SerializerMethodField(help_text="what was crossed, in words")
    email_to = serializers.ListField(child=serializers.EmailField())
    email_sent_at = serializers.DateTimeField(allow_null=True)
    email_error = serializers.CharField()
    webhook_url = serializers.CharField()
    webhook_sent_at = serializers.DateTimeField(allow_null=True)
    webhook_error = serializers.CharField()

    def get_message(self, alert) -> str:
        return alert_words(alert)[1]


class BudgetOutput(serializers.Serializer):
    monthly_cents = serializers.IntegerField(allow_null=True, help_text="null: no budget set")
    thresholds = serializers.ListField(child=serializers.IntegerField(), help_text="percent")
    at_limit = serializers.ChoiceField(choices=["notify", "degrade"])
    webhook_url = serializers.CharField(allow_null=True)
    webhook_secret_set = serializers.BooleanField()
    webhook_secret = serializers.CharField(
        required=False, help_text="only in the answer that issued it: shown once"
    )
    currency = serializers.CharField()
    period = serializers.CharField(help_text="this month, YYYY-MM (UTC)")
    as_of = serializers.DateTimeField()
    spend_cents = serializers.IntegerField(help_text="the month to date, priced as the invoice")
    percent = serializers.FloatField(allow_null=True, help_text="spend of the budget")
    degraded = serializers.BooleanField(help_text="new connections are refused now (0x97)")
    updated_at = serializers.DateTimeField(allow_null=True)
    alerts = BudgetAlertOutput(many=True, help_text="this month's")


class BudgetInput(serializers.Serializer):
    """Documents the body; the service validates it (and names unknown fields)."""

    monthly_cents = serializers.IntegerField(min_value=1)
    thresholds = serializers.ListField(child=serializers.IntegerField(), required=False)
    at_limit = serializers.ChoiceField(choices=["notify", "degrade"], required=False)
    webhook_url = serializers.URLField(required=False, allow_null=True, allow_blank=True)
    rotate_webhook_secret = serializers.BooleanField(required=False)


class BillingDetailsSerializer(serializers.Serializer):
    company_name = serializers.CharField(required=False, allow_blank=True)
    address = serializers.CharField(required=False, allow_blank=True, help_text="lines")
    country = serializers.CharField(required=False, allow_blank=True)
    tax_id = serializers.CharField(required=False, allow_blank=True)
    email = serializers.CharField(required=False, allow_blank=True)
    purchase_order = serializers.CharField(required=False, allow_blank=True)
    updated_at = serializers.DateTimeField(read_only=True, allow_null=True)


def _body(request) -> Any:
    data = request.data
    return data.dict() if hasattr(data, "dict") else data  # a form's QueryDict: plain values


class BudgetView(TenantAPIView):
    """The tenant's monthly budget against the month to date."""

    @extend_schema(responses=BudgetOutput, operation_id="v1_budget_retrieve")
    def get(self, request):
        return Response(BudgetOutput(budget_selectors.budget_status(tenant=self.tenant)).data)

    @extend_schema(
        request=BudgetInput,
        responses=BudgetOutput,
        operation_id="v1_budget_update",
        examples=[
            OpenApiExample(
                "Degrade at 25.00",
                value={
                    "monthly_cents": 2500,
                    "thresholds": [50, 80, 100],
                    "at_limit": "degrade",
                    "webhook_url": "https://example.com/hooks/budget",
                },
                request_only=True,
            )
        ],
    )
    def put(self, request):
        _, secret = budgets.budget_set(self.tenant, _body(request))
        body = BudgetOutput(budget_selectors.budget_status(tenant=self.tenant)).data
        if secret is not None:
            body["webhook_secret"] = secret
        return Response(body)

    @extend_schema(responses={204: None}, operation_id="v1_budget_destroy")
    def delete(self, request):
        budgets.budget_delete(self.tenant)
        return Response(status=status.HTTP_204_NO_CONTENT)


class BudgetAlertsView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(BudgetAlertOutput),
        operation_id="v1_budget_alerts_list",
    )
    def get(self, request):
        alerts = budget_selectors.alerts_list(tenant=self.tenant)
        return paginated(self, request, alerts, BudgetAlertOutput)


class BillingDetailsView(TenantAPIView):
    """Who the tenant's invoices are addressed to (copied onto each invoice when issued)."""

    @extend_schema(responses=BillingDetailsSerializer, operation_id="v1_billing_details_retrieve")
    def get(self, request):
        details = billing_details.billing_details_get(tenant=self.tenant)
        return Response(BillingDetailsSerializer(details).data)

    @extend_schema(
        request=BillingDetailsSerializer,
        responses=BillingDetailsSerializer,
        operation_id="v1_billing_details_update",
    )
    def put(self, request):
        details = billing_details.billing_details_set(self.tenant, _body(request))
        return Response(BillingDetailsSerializer(details).data)

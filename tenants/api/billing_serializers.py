"""The REST API's serializers of invoices and their lines (`billing_views`)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers


class InvoiceLineOutput(serializers.Serializer):
    code = serializers.ChoiceField(
        choices=[
            "base_fee",
            "messages",
            "connection_minutes",
            "rules_triggered",
            "actions_executed",
            "storage_gb_hours",
            "job_executions",
            "shadow_operations",
            "sink_gb",
            "adjustment",
            "credit",
        ]
    )
    description = serializers.CharField()
    quantity = serializers.FloatField()
    included = serializers.FloatField()
    billable = serializers.FloatField()
    unit_price = serializers.CharField(help_text="decimal text, per `per` units")
    per = serializers.IntegerField()
    amount_cents = serializers.IntegerField()
    for_period = serializers.CharField(required=False, help_text="adjustments: the month adjusted")
    label = serializers.CharField(
        help_text='in words with its unit: "Messages (per million, 5 KB units)"'
    )
    unit = serializers.CharField(help_text="what `quantity` counts: minutes, GB-hours…")


class InvoiceOutput(serializers.Serializer):
    period = serializers.CharField()
    status = serializers.CharField()
    currency = serializers.CharField()
    total_cents = serializers.IntegerField()
    lines = serializers.SerializerMethodField()
    line_items = serializers.SerializerMethodField(help_text="the same lines (older name)")
    price_book_version = serializers.IntegerField(allow_null=True)
    checksum = serializers.CharField()
    input_checksum = serializers.CharField()
    issued_at = serializers.DateTimeField(allow_null=True)
    created_at = serializers.DateTimeField()
    number = serializers.CharField(allow_null=True, help_text="sequential per issuer; set at issue")
    issue_date = serializers.DateField(allow_null=True)
    due_date = serializers.DateField(allow_null=True)
    issuer = serializers.JSONField(help_text="{name, address: [lines], tax_id, email} at issue")
    billed_to = serializers.JSONField(
        help_text="{company_name, address: [lines], country, tax_id, email, purchase_order}"
    )
    subtotal_cents = serializers.IntegerField(source="total_cents", help_text="= total_cents")
    tax_name = serializers.CharField()
    tax_rate = serializers.DecimalField(max_digits=6, decimal_places=3, help_text="percent")
    tax_cents = serializers.IntegerField()
    total_due_cents = serializers.IntegerField(help_text="total_cents + tax_cents")

    def _lines(self, invoice) -> list[dict]:
        from tenants.billing.invoice_words import line_label, line_unit

        return [
            {**line, "label": line_label(line), "unit": line_unit(line)}
            for line in invoice.line_items
        ]

    @extend_schema_field(InvoiceLineOutput(many=True))
    def get_lines(self, invoice) -> list[dict]:
        return self._lines(invoice)

    @extend_schema_field(InvoiceLineOutput(many=True))
    def get_line_items(self, invoice) -> list[dict]:
        return self._lines(invoice)

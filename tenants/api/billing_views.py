"""REST API of invoices: `/invoices` (a page of them) and `/invoices/{YYYY-MM}` as JSON, CSV or
PDF. Thin: `tenants.billing.selectors` reads, `tenants.billing.invoice_render` renders."""

from __future__ import annotations

from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework.response import Response

from tenants.api import billing_serializers as s
from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.views import TenantAPIView, paginated
from tenants.billing import invoice_render
from tenants.billing import selectors as billing_selectors


class InvoiceView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS,
        responses=page_of(s.InvoiceOutput),
        operation_id="v1_invoices_list",
    )
    def get(self, request):
        return paginated(
            self, request, billing_selectors.invoices_list(tenant=self.tenant), s.InvoiceOutput
        )


class InvoiceDetailView(TenantAPIView):
    """`/invoices/{YYYY-MM}` as JSON, `.csv` or `.pdf`; another tenant's period is a 404."""

    @extend_schema(responses=s.InvoiceOutput)
    def get(self, request, period: str, fmt: str | None = None):
        invoice = billing_selectors.invoice_get(tenant=self.tenant, period=period)
        name = f"invoice-{self.tenant.slug}-{period}"
        if fmt == "csv":
            response = HttpResponse(invoice_render.invoice_csv(invoice), content_type="text/csv")
            response["Content-Disposition"] = f'attachment; filename="{name}.csv"'
            return response
        if fmt == "pdf":
            response = HttpResponse(
                invoice_render.invoice_pdf(invoice), content_type="application/pdf"
            )
            response["Content-Disposition"] = f'attachment; filename="{name}.pdf"'
            return response
        return Response(s.InvoiceOutput(invoice).data)

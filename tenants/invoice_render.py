"""An invoice as CSV and as PDF (WeasyPrint, from a Django template)."""

from __future__ import annotations

import csv
import io

from django.template.loader import render_to_string

from tenants.models import Invoice

CSV_COLUMNS = (
    "code",
    "description",
    "quantity",
    "included",
    "billable",
    "unit_price",
    "per",
    "amount_cents",
)


def money(cents: int, currency: str) -> str:
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100:,}.{abs(cents) % 100:02d} {currency}"


def invoice_csv(invoice: Invoice) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for line in invoice.line_items:
        writer.writerow([line.get(column, "") for column in CSV_COLUMNS])
    writer.writerow(["total", "", "", "", "", "", "", invoice.total_cents])
    return out.getvalue()


def invoice_pdf(invoice: Invoice) -> bytes:
    from weasyprint import HTML

    lines = [
        {**line, "amount": money(line["amount_cents"], invoice.currency)}
        for line in invoice.line_items
    ]
    html = render_to_string(
        "portal/invoice_pdf.html",
        {
            "invoice": invoice,
            "tenant": invoice.tenant,
            "lines": lines,
            "total": money(invoice.total_cents, invoice.currency),
        },
    )
    return HTML(string=html).write_pdf()

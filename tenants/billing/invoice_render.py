"""An invoice as CSV and as PDF (WeasyPrint, from a Django template).

The CSV is one table a spreadsheet opens as it is: the job's columns as before (`code`,
`quantity`…), the invoice's number and customer on every row, each line in words with its unit,
`amount_cents` last; the `subtotal`, `tax` and `total` rows close it. No cell is ever a formula: text that
starts with `=`, `+`, `-`, `@`, a tab or a carriage return (a customer's name is the tenant's own
text, and so is a device's name) is written with a leading `'`, as OWASP advises; numbers stay
numbers.

Under the lines, before `subtotal`, the per-device drill-down (`tenants.billing.invoice_devices`): for each
line metered per device (messages, connection minutes, rules triggered, actions executed) a
`per_device` row (the section's header:
the line's label "… by device" and its amount), then one `device` row per device with its units
and its share of the line's amount (whole cents that add up to the line). Their codes are not the
lines' codes, so a reader keyed on `code` finds the lines as before; the PDF has no such rows."""

from __future__ import annotations

import csv
import io
import re
from decimal import Decimal
from typing import Any

from django.template.loader import render_to_string

from tenants.billing.invoice_devices import UNRECORDED, invoice_drilldown
from tenants.billing.invoice_words import DEVICE_LABELS, line_words, money
from tenants.models import Invoice

__all__ = ["CSV_COLUMNS", "invoice_csv", "invoice_pdf", "money", "safe_cell"]

# The job's columns first, the words after, and the amount in cents last on every row (so the
# last cell of the last row is the total due, as before the words were added).
CSV_COLUMNS = (
    "code",
    "description",
    "quantity",
    "included",
    "billable",
    "unit_price",
    "per",
    "invoice_number",
    "period",
    "customer",
    "item",
    "unit",
    "line_code",
    "device",
    "currency",
    "amount",
    "amount_cents",
)
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
PLAIN_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?")


def safe_cell(value: Any) -> Any:
    """A value a spreadsheet shows as it is: text that would start a formula gets a `'`."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        if not PLAIN_NUMBER.fullmatch(value):  # "-3.50" is a number, not a formula
            return "'" + value
    return value


def _customer(invoice: Invoice) -> str:
    billed = invoice.billed_to or {}
    return billed.get("company_name") or invoice.tenant.name or invoice.tenant.slug


def _tax_words(invoice: Invoice) -> str:
    if not invoice.tax_cents and not invoice.tax_rate:
        return "Tax"
    rate = Decimal(str(invoice.tax_rate)).normalize()
    return f"{invoice.tax_name or 'Tax'} ({rate:f} %)"


def invoice_csv(invoice: Invoice) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    common = {
        "invoice_number": invoice.number or "",
        "period": invoice.period,
        "customer": _customer(invoice),
        "currency": invoice.currency,
    }
    for line in invoice.line_items:
        words = line_words(line, invoice.currency)
        row = {
            **{column: line.get(column, "") for column in CSV_COLUMNS},
            "item": words["label"],
            "unit": words["unit"],
            "amount": words["amount"],
            **common,
        }
        writer.writerow([safe_cell(row[column]) for column in CSV_COLUMNS])
    for row in _drilldown_rows(invoice, common):
        writer.writerow([safe_cell(row[column]) for column in CSV_COLUMNS])
    for code, words, cents in (
        ("subtotal", "Subtotal", invoice.total_cents),
        ("tax", _tax_words(invoice), invoice.tax_cents),
        ("total", "Total due", invoice.total_due_cents),
    ):
        row = {column: "" for column in CSV_COLUMNS}
        row.update(code=code, item=words, amount_cents=cents, **common)
        row["amount"] = money(cents, invoice.currency)
        writer.writerow([safe_cell(row[column]) for column in CSV_COLUMNS])
    return out.getvalue()


UNRECORDED_WORDS = (
    "(not recorded per device)",
    "units of the line with no per-device record (metered before per-device metering began)",
)
UNNAMED_DEVICE = "(unnamed)"  # the "" of a will restored after a broker restart


def _drilldown_rows(invoice: Invoice, common: dict[str, Any]) -> list[dict[str, Any]]:
    """The per-device section: per drilled line a `per_device` header, then its `device` rows."""
    rows = []
    blank = {column: "" for column in CSV_COLUMNS}
    for line, shares in invoice_drilldown(invoice):
        words = line_words(line, invoice.currency)
        header = {
            **blank,
            "code": "per_device",
            "description": "by device: shares of the line's amount (not added to the total again)",
            "quantity": line.get("quantity", ""),
            "item": f"{words['label']} by device",
            "unit": words["unit"],
            "line_code": line["code"],
            "amount": words["amount"],
            "amount_cents": int(line.get("amount_cents", 0)),
            **common,
        }
        rows.append(header)
        for share in shares:
            if share.device is UNRECORDED:
                device, description = UNRECORDED_WORDS
            else:
                device = share.device or UNNAMED_DEVICE
                description = DEVICE_LABELS.get(share.device, "")
            rows.append(
                {
                    **blank,
                    "code": "device",
                    "description": description,
                    "quantity": share.quantity,
                    "item": words["label"],
                    "unit": words["unit"],
                    "line_code": line["code"],
                    "device": device,
                    "amount": money(share.amount_cents, invoice.currency),
                    "amount_cents": share.amount_cents,
                    **common,
                }
            )
    return rows


def invoice_pdf(invoice: Invoice) -> bytes:
    from weasyprint import HTML

    lines = [{**line, **line_words(line, invoice.currency)} for line in invoice.line_items]
    html = render_to_string(
        "portal/invoice_pdf.html",
        {
            "invoice": invoice,
            "tenant": invoice.tenant,
            "issuer": invoice.issuer or {},
            "billed_to": invoice.billed_to or {},
            "lines": lines,
            "subtotal": money(invoice.total_cents, invoice.currency),
            "tax_words": _tax_words(invoice),
            "tax": money(invoice.tax_cents, invoice.currency),
            "total": money(invoice.total_due_cents, invoice.currency),
        },
    )
    return HTML(string=html).write_pdf()

"""Invoices a finance team accepts (issue 33, point 4): numbers sequential per issuer and never
given twice (issued at once from eight connections; a deleted tenant's number not reused), the
issuer and the tenant's billing details as they stood when issued, issue and due dates, lines in
words with their unit, the tax; the PDF's text (pdftotext) and a CSV without formulas;
`billing_report --issue` refusing a month that has not ended."""

from __future__ import annotations

import csv
import io
import subprocess
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from common.charges.pricing import build_invoice
from tenants.billing import details as billing_details
from tenants.billing import invoicing
from tenants.billing.services import price_book_for
from tenants.models import Invoice, Tenant
from tenants.tenant import services as tenant_services
from tests.api.conftest import acme  # noqa: F401 (fixture)

ISSUER = {
    "key": "test-issuer",
    "name": "Brokerage GmbH",
    "address": "Hafenstrasse 1\n20457 Hamburg\nGermany",
    "tax_id": "DE123456789",
    "email": "billing@brokerage.example",
}


@pytest.fixture
def issuer(settings):
    settings.INVOICE_ISSUER = ISSUER
    settings.INVOICE_NUMBER_PREFIX = "BRK-"
    settings.INVOICE_DUE_DAYS = 14
    settings.INVOICE_TAX_RATE = "19"
    settings.INVOICE_TAX_NAME = "VAT"


def draft(tenant: Tenant, period: str = "2026-09", **usage: int) -> Invoice:
    """A draft as the billing job writes it (the same document function)."""
    book = price_book_for(tenant.plan, period)
    document = build_invoice(
        tenant=tenant.slug,
        period=period,
        usage={"messages": 0, **usage},
        usage_digest="test",
        price_book=book.as_document(),
    )
    return Invoice.objects.create(
        tenant=tenant,
        period=period,
        status="draft",
        currency=document["currency"],
        total_cents=document["total_cents"],
        line_items=document["lines"],
        price_book=book,
        price_book_version=book.version,
        checksum="c" * 64,
    )


@pytest.mark.django_db(transaction=True)
def test_numbers_are_sequential_under_concurrent_issues_and_never_reused(issuer):
    tenants = [tenant_services.tenant_create(f"t{i}-co") for i in range(8)]
    drafts = [draft(tenant) for tenant in tenants]
    barrier = threading.Barrier(len(drafts))
    numbers: list[str] = []
    errors: list[BaseException] = []

    def issue(invoice_id: int) -> None:
        barrier.wait()
        try:
            numbers.append(invoicing.invoice_issue(invoice_id).number)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=issue, args=(d.id,)) for d in drafts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(numbers) == [f"BRK-{n:06d}" for n in range(1, 9)]  # no gap, no twice

    tenants[-1].delete()  # its invoice (the last number, maybe) goes with it; the number does not
    later = draft(tenant_services.tenant_create("late-co"), "2026-10")
    assert invoicing.invoice_issue(later.id).number == "BRK-000009"
    with pytest.raises(Exception, match="already issued"):
        invoicing.invoice_issue(later.id)


def test_pdf_and_csv_read_as_an_invoice(acme, issuer, tmp_path):  # noqa: F811
    tenant, api = acme
    billing_details.billing_details_set(
        tenant,
        {
            "company_name": "Acme Sensors Ltd",
            "address": "1 Sensor Way\nLeeds LS1 4AP",
            "country": "United Kingdom",
            "tax_id": "GB987654321",
            "purchase_order": "PO-7731",
        },
    )
    invoice = draft(tenant, messages=4_500_000, connection_minutes=43_200)
    issued = invoicing.invoice_issue(invoice.id)
    today = datetime.now(UTC).date()
    assert issued.number == "BRK-000001" and issued.issue_date == today
    assert issued.due_date == today + timedelta(days=14)
    # Free plan: 1,000,000 messages included, 3,500,000 at 1.00 per million = 3.50; VAT 19 %.
    assert (issued.total_cents, issued.tax_cents, issued.total_due_cents) == (350, 67, 417)

    # Changed later: the issued invoice keeps what it said.
    billing_details.billing_details_set(tenant, {"company_name": "Renamed Ltd"})

    body = api.get("/api/v1/invoices/2026-09").json()
    assert body["number"] == "BRK-000001" and body["due_date"] == str(today + timedelta(days=14))
    assert body["issuer"]["name"] == "Brokerage GmbH"
    assert body["billed_to"]["company_name"] == "Acme Sensors Ltd"
    assert (body["total_cents"], body["tax_cents"], body["total_due_cents"]) == (350, 67, 417)
    lines = {line["code"]: line for line in body["lines"]}
    assert lines["messages"]["label"] == "Messages (per million, 5 KB units)"
    assert lines["connection_minutes"]["unit"] == "minutes"

    pdf = api.get("/api/v1/invoices/2026-09.pdf")
    assert pdf["Content-Type"] == "application/pdf"
    (tmp_path / "invoice.pdf").write_bytes(pdf.content)
    text = subprocess.run(
        ["pdftotext", str(tmp_path / "invoice.pdf"), "-"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    text = " ".join(text.split())  # a label wrapped in its cell reads as one
    for expected in (
        "Invoice number",
        "BRK-000001",
        f"Issue date {today:%Y-%m-%d}",
        f"Due date {today + timedelta(days=14):%Y-%m-%d}",
        "Brokerage GmbH",
        "Hafenstrasse 1",
        "Tax ID DE123456789",
        "Acme Sensors Ltd",
        "Leeds LS1 4AP",
        "Tax ID GB987654321",
        "Purchase order PO-7731",
        "Messages (per million, 5 KB units)",
        "Connection minutes (per million)",
        "4,500,000 1,000,000 3,500,000 1.00 USD per million 3.50 USD",  # the messages row
        "Subtotal 3.50 USD VAT (19 %) 0.67 USD Total due 4.17 USD",
    ):
        assert expected in text, expected
    assert "connection_minutes" not in text and "Renamed" not in text  # words, as issued

    rows = list(
        csv.DictReader(io.StringIO(api.get("/api/v1/invoices/2026-09.csv").content.decode()))
    )
    by_code = {row["code"]: row for row in rows}
    assert by_code["messages"]["item"] == "Messages (per million, 5 KB units)"
    assert by_code["messages"]["amount_cents"] == "350"
    assert by_code["messages"]["invoice_number"] == "BRK-000001"
    assert [r["code"] for r in rows[-3:]] == ["subtotal", "tax", "total"]
    assert [r["amount_cents"] for r in rows[-3:]] == ["350", "67", "417"]
    assert by_code["tax"]["item"] == "VAT (19 %)"
    for row in rows:
        for cell in row.values():
            assert not cell.startswith(("=", "+", "@")), cell


def test_csv_never_starts_a_cell_with_a_formula(acme, issuer):  # noqa: F811
    tenant, api = acme
    billing_details.billing_details_set(tenant, {"company_name": '=HYPERLINK("http://x","y")'})
    invoice = draft(tenant)
    invoice.line_items.append(
        {
            "code": "credit",
            "description": "-1+1|cmd",  # an operator's reason, as written
            "quantity": 1,
            "included": 0,
            "billable": 1,
            "unit_price": "-0.50",
            "per": 1,
            "amount_cents": -50,
        }
    )
    invoice.total_cents -= 50
    invoice.save()
    invoicing.invoice_issue(invoice.id)
    text = api.get("/api/v1/invoices/2026-09.csv").content.decode()
    rows = list(csv.DictReader(io.StringIO(text)))
    assert rows[0]["customer"] == '\'=HYPERLINK("http://x","y")'
    credit = next(r for r in rows if r["code"] == "credit")
    assert credit["description"] == "'-1+1|cmd" and credit["item"] == "'-1+1|cmd"
    assert credit["unit_price"] == "-0.50" and credit["amount_cents"] == "-50"  # numbers stay


def test_billing_report_issue_refuses_a_month_that_has_not_ended(db):
    this_month = datetime.now(UTC).strftime("%Y-%m")
    with pytest.raises(CommandError, match=f"{this_month} has not ended.*--force"):
        call_command("billing_report", "--period", this_month, "--issue", stdout=io.StringIO())
    from tenants.billing.services import period_unfinished

    assert period_unfinished("2026-09", datetime(2026, 10, 1, tzinfo=UTC)) is None
    assert period_unfinished("2026-09", datetime(2026, 9, 30, 23, 59, tzinfo=UTC))


def test_billing_details_api_names_problems_and_the_portal_form_saves(acme, client):  # noqa: F811
    _, api = acme
    assert api.get("/api/v1/billing-details").json()["company_name"] == ""
    bad = api.put("/api/v1/billing-details", {"email": "not-mail", "vat": "x"}, format="json")
    fields = bad.json()["error"]["fields"]
    assert bad.status_code == 400 and "not an email" in fields["email"][0] and "vat" in fields
    one_line = api.put("/api/v1/billing-details", {"country": "A\nB"}, format="json")
    assert one_line.status_code == 400 and "one line" in one_line.json()["error"]["message"]
    good = api.put(
        "/api/v1/billing-details",
        {"company_name": "Acme Sensors Ltd", "address": "1 Sensor Way\nLeeds"},
        format="json",
    )
    assert good.status_code == 200 and good.json()["address"] == "1 Sensor Way\nLeeds"
    client.login(username="owner@acme.io", password="pass-w0rd-acme")
    saved = client.post("/billing/details/", {"company_name": "Acme Ltd", "tax_id": "GB1"})
    assert saved.status_code == 302
    assert api.get("/api/v1/billing-details").json()["tax_id"] == "GB1"
    assert 'value="Acme Ltd"' in client.get("/billing/details/").content.decode()

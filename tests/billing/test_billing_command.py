"""Price books and the billing commands on real Postgres and Spark local mode: set_price,
billing_report (drafts, --issue, summary JSON), billing_verify, late usage → adjustment."""

from __future__ import annotations

import io
import json
from datetime import UTC, date, datetime, timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from common.charges.pricing import canonical_json, sha256_hex
from common.stores.object_store import LocalObjectStore
from tenants.billing import services as billing
from tenants.models import Invoice, PriceBook, Tenant
from tenants.tenant import services as tenant_services
from tests.billing.usage_rows import row, write_rows

pytestmark = pytest.mark.django_db(transaction=True)

SEPTEMBER = datetime(2026, 9, 1, tzinfo=UTC)
OCTOBER = datetime(2026, 10, 1, tzinfo=UTC)


STDERR: list[str] = []


def command(*args) -> dict:
    out, err = io.StringIO(), io.StringIO()
    call_command(*args, stdout=out, stderr=err)
    STDERR.append(err.getvalue())
    return json.loads(out.getvalue())


@pytest.fixture
def store(tmp_path, monkeypatch, spark):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    return LocalObjectStore(tmp_path)


def pro_prices():
    """Pro at $49 a month, messages $1.00 per million after a free million, minutes $0.08/M."""
    plan = tenant_services.plan_get_or_create("pro")
    return command(
        "set_price",
        "pro",
        "--from",
        "2026-01-01",
        "--base-fee-cents",
        "4900",
        "--set",
        "messages.included=1000000",
        "--set",
        "messages.per=1000000",
        "--set",
        "messages.tiers=:1.00",
        "--set",
        "connection_minutes.included=0",
        "--set",
        "connection_minutes.per=1000000",
        "--set",
        "connection_minutes.tiers=:0.08",
    ), plan


def test_set_price_versions_and_clear_errors():
    book, plan = pro_prices()
    assert book["version"] == 2 and book["base_fee_cents"] == 4900  # v1: the list prices
    assert book["dimensions"]["messages"]["tiers"] == [{"up_to": None, "price": "1.00"}]
    with pytest.raises(
        CommandError,
        match=r"dimensions.messages.tiers\[1\].up_to: bounds must be whole numbers, increasing",
    ):
        command(
            "set_price",
            "pro",
            "--from",
            "2026-03-01",
            "--set",
            "messages.tiers=900:1.00,800:0.5,:0.1",
        )
    with pytest.raises(CommandError, match="already has prices from 2026-01-01"):
        command("set_price", "pro", "--from", "2026-01-01")
    with pytest.raises(CommandError, match="Unknown plan"):
        command("set_price", "gold", "--from", "2026-01-01")
    assert billing.price_book_for(plan, "2026-05").version == 2
    assert billing.price_book_for(plan, "2025-12").version == 1


def test_billing_report_drafts_issues_verifies_and_adjusts(store):
    pro_prices()
    acme = tenant_services.tenant_create("acme", plan="pro")
    tenant_services.tenant_create("quiet", plan="pro")
    tenant_services.tenant_create(
        "newcomer", plan="pro"
    )  # created after September: not billed for it
    Tenant.objects.exclude(slug="newcomer").update(created_at=datetime(2026, 1, 5, tzinfo=UTC))
    Tenant.objects.filter(slug="newcomer").update(created_at=datetime(2026, 10, 2, tzinfo=UTC))
    write_rows(
        store,
        [
            row("acme", SEPTEMBER + timedelta(hours=h), messages=300_000, connection_minutes=600)
            for h in range(10)
        ],
    )
    summary = command("billing_report", "--period", "2026-09")
    assert "[" + "#" * 30 + "] 6/6 storing invoices" in STDERR[-1]  # the progress bar
    assert summary["tenants"] == 2 and summary["usage_rows"] == 10
    by_tenant = {i["tenant"]: i for i in summary["invoices"]}
    # 3,000,000 messages - 1,000,000 free = 2 M at $1.00 = $2.00; 6,000 minutes: $0.00048 → 0 ¢
    assert by_tenant["acme"]["total_cents"] == 4900 + 200 + 0
    assert by_tenant["quiet"]["total_cents"] == 4900
    assert summary["revenue"] == {
        "period": "2026-09",
        "tenants": 2,
        "billed_tenants": 2,
        "total_cents": {"USD": 10000},
    }
    invoice = Invoice.objects.get(tenant=acme, period="2026-09")
    assert invoice.status == "draft" and invoice.price_book_version == 2
    assert invoice.checksum == sha256_hex(invoice.document.encode())
    lines = {line["code"]: line for line in invoice.line_items}
    assert (lines["messages"]["quantity"], lines["messages"]["billable"]) == (3_000_000, 2_000_000)

    issued = command("billing_report", "--period", "2026-09", "--issue")
    assert {i["state"] for i in issued["invoices"]} == {"issued"}
    first_bytes = Invoice.objects.get(tenant=acme, period="2026-09").document
    assert command("billing_verify", "--period", "2026-09")["differences"] == []

    # New prices from October leave the issued September invoice alone.
    command("set_price", "pro", "--from", "2026-10-01", "--base-fee-cents", "5900")
    with pytest.raises(CommandError, match="already invoiced"):
        command("set_price", "pro", "--from", "2026-09-01")
    # A September record arrives late: the issued invoice does not move, October adjusts.
    write_rows(store, [row("acme", SEPTEMBER + timedelta(days=20), messages=1_500_000)], "late")
    again = command("billing_report", "--period", "2026-09")
    assert {i["state"] for i in again["invoices"]} == {"unchanged", "differs"}
    assert Invoice.objects.get(tenant=acme, period="2026-09").document == first_bytes
    with pytest.raises(CommandError, match="1 difference|2 difference"):
        command("billing_verify", "--period", "2026-09")
    october = command("billing_report", "--period", "2026-10", "--tenant", "acme", "--issue")
    (summary_line,) = october["invoices"]
    invoice = Invoice.objects.get(tenant=acme, period="2026-10")
    assert invoice.price_book_version == 3
    adjustment = [line for line in invoice.line_items if line["code"] == "adjustment"]
    assert [(a["for_period"], a["usage_delta"], a["amount_cents"]) for a in adjustment] == [
        ("2026-09", 1_500_000, 150)
    ]
    assert summary_line["total_cents"] == 5900 + 150
    # Billed once: November finds nothing left to adjust for September.
    command("billing_report", "--period", "2026-11", "--tenant", "acme")
    november = Invoice.objects.get(tenant=acme, period="2026-11")
    assert [line for line in november.line_items if line["code"] == "adjustment"] == []
    assert json.loads(invoice.document)["input_checksum"] == invoice.input_checksum
    assert canonical_json(json.loads(invoice.document)).decode() == invoice.document


def test_billing_report_rejects_a_bad_period(store):
    with pytest.raises(CommandError, match="YYYY-MM"):
        command("billing_report", "--period", "2026-9x")
    with pytest.raises(CommandError, match="Unknown tenant"):
        command("billing_report", "--period", "2026-09", "--tenant", "nobody")
    assert PriceBook.objects.count() == 0 and date(2026, 9, 1)

"""Job executions as a billed dimension added after invoices were first issued
(`common.charges.pricing.LATER_DIMENSIONS`): invoices of tenants that ran no job keep their bytes, pinned
here by the SHA-256 the code gave before the dimension existed; a book that prices them prices
them, one that predates them uses the list price."""

from __future__ import annotations

from common.charges.pricing import build_invoice, canonical_json, sha256_hex, validate_price_book
from tests.billing.test_job import SMALL

USAGE = {
    "messages": 1234,
    "connection_minutes": 777,
    "rules_triggered": 55,
    "actions_executed": 9,
    "storage_byte_hours": 123456789012,
}
JOBS_PRICED = {
    **SMALL,
    "dimensions": {
        **SMALL["dimensions"],
        "job_executions": {
            "included": 100,
            "per": 1000,
            "tiers": [{"up_to": None, "price": "2.00"}],
        },
    },
}


# A book that names job executions, as a plan's next version may.
LIST_BOOK = {
    **SMALL,
    "dimensions": {
        **SMALL["dimensions"],
        "job_executions": {"included": 0, "per": 1000, "tiers": [{"up_to": None, "price": "3.00"}]},
    },
}


def invoice(usage: dict, book: dict) -> dict:
    return build_invoice(
        tenant="alpha", period="2026-09", usage=usage, usage_digest="d" * 64, price_book=book
    )


def test_invoices_without_job_executions_keep_their_bytes():
    # What the code before job executions were billed gave for the same inputs.
    assert (
        sha256_hex(canonical_json(invoice(USAGE, SMALL)))
        == "62b7cd1841b446b74b9441e5824f0e978a4c9fb9c130ba2ac68f565abf9bcaff"
    )
    zero = {**USAGE, "job_executions": 0}
    assert (
        sha256_hex(canonical_json(invoice(zero, LIST_BOOK)))
        == "a695f861c6baa9006caeb7ee62beac8f45d56038fcec25f0f9fb1a26910978b9"
    )


def test_a_book_that_prices_job_executions_prices_them():
    validate_price_book(JOBS_PRICED["dimensions"], "EUR", 1999)
    document = invoice({**USAGE, "job_executions": 1100}, JOBS_PRICED)
    (line,) = [line for line in document["lines"] if line["code"] == "job_executions"]
    assert (line["included"], line["billable"], line["amount_cents"]) == (100, 1000, 200)
    assert "list_prices" not in document["inputs"]
    listed = invoice({**USAGE, "job_executions": 1100}, SMALL)
    (line,) = [line for line in listed["lines"] if line["code"] == "job_executions"]
    assert (line["billable"], line["amount_cents"]) == (1100, 330)
    assert "list_prices" in listed["inputs"]


def test_the_free_plan_includes_job_executions_like_its_other_units(db):
    """Issue 41: the Free plan billed job executions from the first while every other unit had
    an allowance. Its price book (new, or an existing one through migration 0031) includes
    1,000 a month; the invoice and the forecast price the same allowance."""
    from datetime import UTC, date, datetime
    from importlib import import_module

    from django.apps import apps

    from common.charges.pricing import invoice_lines
    from tenants.accounts import services as account_services
    from tenants.billing import services as billing
    from tenants.models import Plan, PriceBook, Usage
    from tenants.usage import selectors as usage_selectors

    tenant, _, _ = account_services.signup(
        tenant="acme", email="o@acme.io", password="pass-w0rd-acme"
    )
    assert tenant.plan.monthly_price_cents == 0  # Free
    usage = {"job_executions": 1_500}
    book = billing.price_book_for(tenant.plan, "2026-11")
    [jobs] = [
        line
        for line in invoice_lines(usage, {**book.as_document(), "base_fee_cents": 0})
        if line["code"] == "job_executions"
    ]
    assert (jobs["included"], jobs["billable"]) == (1_000, 500)
    Usage.objects.create(
        tenant=tenant, minute=datetime(2026, 11, 2, tzinfo=UTC), job_executions=1_500
    )
    forecast = usage_selectors.usage_forecast(
        tenant=tenant, now=datetime(2026, 11, 2, 12, tzinfo=UTC)
    )
    [ahead] = [d for d in forecast["dimensions"] if d["dimension"] == "job_executions"]
    assert (ahead["included"], ahead["billable"]) == (1_000, 500)

    # A Free plan whose book predates the allowance: the migration adds a version with it.
    old = Plan.objects.create(slug="free-old", name="Free (old)", monthly_price_cents=0)
    PriceBook.objects.create(
        plan=old,
        version=1,
        effective_from=date(2000, 1, 1),
        dimensions={"job_executions": {**LIST_BOOK["dimensions"]["job_executions"]}},
    )
    import_module("tenants.migrations.0031_free_job_executions_included").forwards(apps, None)
    latest = PriceBook.objects.filter(plan=old).order_by("-version").first()
    assert latest.version == 2 and latest.effective_from <= date.today()
    assert latest.dimensions["job_executions"]["included"] == 1_000
    assert PriceBook.objects.get(plan=old, version=1).dimensions["job_executions"]["included"] == 0

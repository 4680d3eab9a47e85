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

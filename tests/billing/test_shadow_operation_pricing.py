"""Device shadow operations priced as AWS prices them (issue 44 point 4): $1.25 per million
operations in 1 KB units, on the invoice once a plan's price book names them (every plan's does
from migration 0035 on, the Free plan with AWS's 225,000 a month). They were metered long before
they were priced: a month priced with an older book bills none — no line, no figure, no
adjustment later — so its invoice keeps its bytes, pinned by the SHA-256 the code gave before."""

from __future__ import annotations

from datetime import UTC, date, datetime
from importlib import import_module

from common.charges.pricing import (
    adjustment_lines,
    build_invoice,
    canonical_json,
    sha256_hex,
    validate_price_book,
)
from tests.billing.test_job import SMALL
from tests.billing.test_job_execution_pricing import USAGE

SHADOWS_PRICED = {
    **SMALL,
    "dimensions": {
        **SMALL["dimensions"],
        "shadow_operations": {
            "included": 225_000,
            "per": 1_000_000,
            "tiers": [{"up_to": None, "price": "1.25"}],
        },
    },
}


def invoice(usage: dict, book: dict) -> dict:
    return build_invoice(
        tenant="alpha", period="2026-09", usage=usage, usage_digest="d" * 64, price_book=book
    )


def test_a_month_priced_before_shadow_operations_were_keeps_its_bytes():
    # The same pins as the job executions' (the code before either was priced), now with a
    # month of shadow operations in the log: an older book bills none of them.
    shadows = {**USAGE, "shadow_operations": 3_000_000}
    assert (
        sha256_hex(canonical_json(invoice(shadows, SMALL)))
        == "62b7cd1841b446b74b9441e5824f0e978a4c9fb9c130ba2ac68f565abf9bcaff"
    )
    # ...nor as late usage of an issued month (an adjustment on a later invoice).
    assert not adjustment_lines(
        period="2026-09",
        fresh_usage=shadows,
        billed_usage=USAGE,
        price_book=SMALL,
    )
    # A book that names them bills nothing for a month without any: the same bytes.
    assert sha256_hex(
        canonical_json(invoice({**USAGE, "shadow_operations": 0}, SHADOWS_PRICED))
    ) == sha256_hex(canonical_json(invoice(USAGE, SHADOWS_PRICED)))


def test_a_book_that_names_shadow_operations_prices_them_per_million():
    validate_price_book(SHADOWS_PRICED["dimensions"], "USD", 0)
    document = invoice({**USAGE, "shadow_operations": 2_225_000}, SHADOWS_PRICED)
    (line,) = [line for line in document["lines"] if line["code"] == "shadow_operations"]
    assert (line["included"], line["billable"], line["amount_cents"]) == (225_000, 2_000_000, 250)
    assert line["description"] == "Device shadow operations (1 KB units)"
    assert document["usage"]["shadow_operations"] == 2_225_000
    assert "list_prices" not in document["inputs"]
    # Late shadow operations of a month priced with that book are adjusted like any unit.
    [late] = adjustment_lines(
        period="2026-09",
        fresh_usage={**USAGE, "shadow_operations": 3_225_000},
        billed_usage={**USAGE, "shadow_operations": 2_225_000},
        price_book=SHADOWS_PRICED,
    )
    assert (late["dimension"], late["usage_delta"], late["amount_cents"]) == (
        "shadow_operations",
        1_000_000,
        125,
    )


def test_plans_price_shadow_operations_from_their_next_uninvoiced_month(db):
    from django.apps import apps

    from tenants.accounts import services as account_services
    from tenants.billing import services as billing
    from tenants.models import Plan, PriceBook, Usage
    from tenants.usage import selectors as usage_selectors

    tenant, _, _ = account_services.signup(
        tenant="acme", email="o@acme.io", password="pass-w0rd-acme"
    )
    assert tenant.plan.monthly_price_cents == 0  # Free: a new book names them, with the tier
    book = billing.price_book_for(tenant.plan, "2026-11").as_document()
    assert book["dimensions"]["shadow_operations"]["included"] == 225_000
    Usage.objects.create(
        tenant=tenant, minute=datetime(2026, 11, 2, tzinfo=UTC), shadow_operations=1_225_000
    )
    forecast = usage_selectors.usage_forecast(
        tenant=tenant, now=datetime(2026, 11, 2, 12, tzinfo=UTC)
    )
    [ahead] = [d for d in forecast["dimensions"] if d["dimension"] == "shadow_operations"]
    assert ahead["priced"] and (ahead["included"], ahead["billable"]) == (225_000, 1_000_000)

    # Plans whose books predate the price: the migration adds a version naming them, and
    # leaves the book that priced the issued months as it was.
    free = Plan.objects.create(slug="free-old", name="Free (old)", monthly_price_cents=0)
    paid = Plan.objects.create(slug="paid-old", name="Paid (old)", monthly_price_cents=4900)
    for plan in (free, paid):
        PriceBook.objects.create(
            plan=plan, version=1, effective_from=date(2000, 1, 1), dimensions=SMALL["dimensions"]
        )
    future = Plan.objects.create(slug="future", name="Future", monthly_price_cents=100)
    PriceBook.objects.create(
        plan=future, version=1, effective_from=date(2999, 1, 1), dimensions=SMALL["dimensions"]
    )
    import_module("tenants.migrations.0035_shadow_operations_priced").forwards(apps, None)
    for plan, included in ((free, 225_000), (paid, 0)):
        latest = PriceBook.objects.filter(plan=plan).order_by("-version").first()
        assert latest.version == 2 and latest.effective_from <= date.today()
        assert latest.dimensions["shadow_operations"] == {
            "included": included,
            "per": 1_000_000,
            "tiers": [{"up_to": None, "price": "1.25"}],
        }
        assert "shadow_operations" not in PriceBook.objects.get(plan=plan, version=1).dimensions
    # A book not yet in force priced nothing: it names them itself.
    assert PriceBook.objects.filter(plan=future).count() == 1
    assert "shadow_operations" in PriceBook.objects.get(plan=future).dimensions
    # Run again: nothing more.
    import_module("tenants.migrations.0035_shadow_operations_priced").forwards(apps, None)
    assert PriceBook.objects.filter(plan=free).count() == 2

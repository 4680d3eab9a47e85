"""The Spark billing job on real Parquet in a local object store (Spark local mode): AWS IoT Core's
published example, an independent computation, byte-for-byte reproducibility, late usage."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from fractions import Fraction

import pytest

from common.charges.pricing import canonical_json, sha256_hex
from common.stores.object_store import LocalObjectStore
from spark.billing.job import Account, IssuedPeriod, run
from tests.billing.usage_rows import row, write_rows

SEPTEMBER = datetime(2026, 9, 1, tzinfo=UTC)

# AWS IoT Core, EU (Ireland): connectivity $0.08 per million minutes; messaging $1.00 per million
# messages for the first billion, $0.80 for the next four billion, $0.70 above five billion.
AWS_IRELAND = {
    "plan": "aws-ireland",
    "version": 1,
    "effective_from": "2026-01-01",
    "currency": "USD",
    "base_fee_cents": 0,
    "dimensions": {
        "connection_minutes": {
            "included": 0,
            "per": 1_000_000,
            "tiers": [{"up_to": None, "price": "0.08"}],
        },
        "messages": {
            "included": 0,
            "per": 1_000_000,
            "tiers": [
                {"up_to": 1_000_000_000, "price": "1.00"},
                {"up_to": 5_000_000_000, "price": "0.80"},
                {"up_to": None, "price": "0.70"},
            ],
        },
    },
}

SMALL = {
    "plan": "small",
    "version": 3,
    "effective_from": "2026-06-01",
    "currency": "EUR",
    "base_fee_cents": 1999,
    "dimensions": {
        "messages": {
            "included": 100,
            "per": 10,
            "tiers": [{"up_to": 500, "price": "0.35"}, {"up_to": None, "price": "0.125"}],
        },
        "connection_minutes": {
            "included": 50,
            "per": 7,
            "tiers": [{"up_to": None, "price": "0.01"}],
        },
        "rules_triggered": {"included": 0, "per": 3, "tiers": [{"up_to": None, "price": "0.005"}]},
        "actions_executed": {
            "included": 10,
            "per": 1,
            "tiers": [{"up_to": None, "price": "0.0015"}],
        },
        "storage_gb_hours": {
            "included": 0,
            "per": 1,
            "tiers": [{"up_to": None, "price": "0.0003"}],
        },
    },
}


def lines_by_code(invoice):
    return {line["code"]: line for line in invoice["lines"]}


def test_aws_published_example_priced_to_the_cent(spark, tmp_path):
    """100,000 devices connected 30 days; 325 messages of 1 KB per device per day."""
    store = LocalObjectStore(tmp_path)
    rows = []
    for minute in range(30 * 1440):
        at = SEPTEMBER + timedelta(minutes=minute)
        messages = 100_000 * 325 if minute % 1440 == 0 else 0  # a day's messages, once a day
        rows.append(row("fleet", at, connection_minutes=100_000, messages=messages))
    write_rows(store, rows)
    (invoice,) = run(spark, store, "2026-09", [Account("fleet", AWS_IRELAND)]).invoices
    lines = lines_by_code(invoice)
    assert lines["connection_minutes"]["quantity"] == 4_320_000_000
    assert lines["connection_minutes"]["amount_cents"] == 345_60
    assert lines["messages"]["quantity"] == 975_000_000
    assert lines["messages"]["amount_cents"] == 975_00
    assert invoice["total_cents"] == 345_60 + 975_00


def independent_amount(quantity: Fraction, spec: dict) -> int:
    """Tiered price of `quantity`, written apart from common.charges.pricing: Fractions, then half-up."""
    billable = max(Fraction(0), quantity - spec["included"])
    total, lower = Fraction(0), Fraction(0)
    for tier in spec["tiers"]:
        upper = Fraction(tier["up_to"]) if tier["up_to"] is not None else billable
        in_tier = max(Fraction(0), min(billable, upper) - lower)
        total += in_tier * Fraction(tier["price"]) / spec["per"]
        lower = upper
    cents = total * 100
    return int(cents) + (1 if cents - int(cents) >= Fraction(1, 2) else 0)


def random_log(seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for tenant in ("alpha", "beta", "gamma"):
        for _ in range(400):
            at = SEPTEMBER + timedelta(minutes=rng.randrange(-2 * 1440, 32 * 1440))
            rows.append(
                row(
                    tenant,
                    at,
                    writer=rng.choice(["broker-a", "broker-b", "rules-live"]),
                    messages=rng.randrange(0, 7),
                    connection_minutes=rng.randrange(0, 3),
                    rules_triggered=rng.randrange(0, 5),
                    actions_executed=rng.randrange(0, 2),
                    storage_byte_hours=rng.randrange(0, 3_000_000_000),
                )
            )
    return rows


def test_invoices_match_an_independent_computation(spark, tmp_path):
    store = LocalObjectStore(tmp_path)
    rows = random_log(7)
    write_rows(store, rows[:600], "broker-a")
    write_rows(store, rows[600:], "broker-b")
    accounts = [Account(t, SMALL) for t in ("alpha", "beta", "gamma", "idle")]
    result = run(spark, store, "2026-09", accounts)
    assert [i["tenant"] for i in result.invoices] == ["alpha", "beta", "gamma", "idle"]
    columns = {
        "messages": "messages",
        "connection_minutes": "connection_minutes",
        "rules_triggered": "rules_triggered",
        "actions_executed": "actions_executed",
        "storage_gb_hours": "storage_byte_hours",
    }
    for invoice in result.invoices:
        mine = [
            r
            for r in rows
            if r["tenant"] == invoice["tenant"]
            and SEPTEMBER <= r["minute"] < datetime(2026, 10, 1, tzinfo=UTC)
        ]
        expected_total = 1999
        lines = lines_by_code(invoice)
        for code, column in columns.items():
            quantity = Fraction(sum(r[column] for r in mine))
            if code == "storage_gb_hours":
                quantity /= 10**9
            amount = independent_amount(quantity, SMALL["dimensions"][code])
            assert Fraction(str(lines[code]["quantity"])) == quantity, code
            assert lines[code]["amount_cents"] == amount, code
            expected_total += amount
        assert invoice["total_cents"] == expected_total
        assert invoice["currency"] == "EUR" and invoice["price_book"] == {
            "plan": "small",
            "version": 3,
        }
    assert lines_by_code(result.invoices[3])["messages"]["quantity"] == 0  # idle: base fee only
    assert result.invoices[3]["total_cents"] == 1999


def test_same_log_and_prices_give_byte_identical_invoices(spark, tmp_path):
    rows = random_log(11)
    first, second = LocalObjectStore(tmp_path / "a"), LocalObjectStore(tmp_path / "b")
    write_rows(first, rows, "broker-a")
    write_rows(second, list(reversed(rows[:500])), "broker-a")  # same rows, other files/order
    write_rows(second, list(reversed(rows[500:])), "broker-b")
    accounts = [Account(t, SMALL) for t in ("alpha", "beta", "gamma")]
    one = [canonical_json(i) for i in run(spark, first, "2026-09", accounts).invoices]
    two = [canonical_json(i) for i in run(spark, second, "2026-09", accounts).invoices]
    again = [canonical_json(i) for i in run(spark, first, "2026-09", accounts).invoices]
    assert one == again
    # Different segment files with the same rows (writer names kept) bill the same bytes.
    assert [sha256_hex(b) for b in one] == [sha256_hex(b) for b in two]


def test_a_tenant_billed_alone_or_among_many_gets_the_same_invoice(spark, tmp_path):
    """The job selects a few tenants' rows before summing and many tenants' groups after: both
    ways give each tenant the same bytes, late months (adjustments) included."""
    store = LocalObjectStore(tmp_path)
    rows = random_log(13)
    extra = [f"tenant-{i:02d}" for i in range(12)]
    rows += [row(t, SEPTEMBER + timedelta(hours=i), messages=i + 1) for i, t in enumerate(extra)]
    write_rows(store, rows)
    august = IssuedPeriod("2026-08", SMALL, {"messages": 1})
    accounts = [Account(t, SMALL, issued=(august,)) for t in ("alpha", "beta", *extra)]
    many = {i["tenant"]: canonical_json(i) for i in run(spark, store, "2026-09", accounts).invoices}
    for account in accounts[:3]:
        (alone,) = run(spark, store, "2026-09", [account]).invoices
        assert canonical_json(alone) == many[account.tenant]


def test_a_late_record_becomes_an_adjustment_line_on_the_next_invoice(spark, tmp_path):
    store = LocalObjectStore(tmp_path)
    write_rows(store, [row("alpha", SEPTEMBER + timedelta(days=3), messages=400)], "broker-a")
    (september,) = run(spark, store, "2026-09", [Account("alpha", SMALL)]).invoices
    assert lines_by_code(september)["messages"]["amount_cents"] == independent_amount(
        Fraction(400), SMALL["dimensions"]["messages"]
    )
    # After September was issued, a broker that was cut off delivers its September minutes.
    write_rows(store, [row("alpha", SEPTEMBER + timedelta(days=29), messages=300)], "broker-late")
    write_rows(store, [row("alpha", datetime(2026, 10, 5, tzinfo=UTC), messages=10)], "broker-a")
    issued = IssuedPeriod("2026-09", SMALL, september["usage"])
    (october,) = run(spark, store, "2026-10", [Account("alpha", SMALL, (issued,))]).invoices
    adjustments = [line for line in october["lines"] if line["code"] == "adjustment"]
    assert len(adjustments) == 1
    (adjustment,) = adjustments
    messages = SMALL["dimensions"]["messages"]
    expected = independent_amount(Fraction(700), messages) - independent_amount(
        Fraction(400), messages
    )
    assert adjustment["for_period"] == "2026-09" and adjustment["usage_delta"] == 300
    assert adjustment["amount_cents"] == expected
    assert lines_by_code(october)["messages"]["quantity"] == 10
    assert october["total_cents"] == sum(line["amount_cents"] for line in october["lines"])
    # Billed again with the adjustment counted, nothing more is owed for September.
    billed = {**september["usage"], "messages": 700}
    (november,) = run(
        spark,
        store,
        "2026-11",
        [Account("alpha", SMALL, (IssuedPeriod("2026-09", SMALL, billed),))],
    ).invoices
    assert [line for line in november["lines"] if line["code"] == "adjustment"] == []


def test_a_period_must_be_a_month():
    from spark.billing.job import period_range

    with pytest.raises(ValueError, match="YYYY-MM"):
        period_range("2026-13")


def test_credits_come_off_the_total_but_never_below_zero(spark, tmp_path):
    store = LocalObjectStore(tmp_path)
    write_rows(store, [row("alpha", SEPTEMBER + timedelta(days=1), messages=400)])
    credits = (
        {"amount_cents": 500, "reason": "outage 2026-09-03"},
        {"amount_cents": 10_000, "reason": "goodwill"},
    )
    (plain,) = run(spark, store, "2026-09", [Account("alpha", SMALL)]).invoices
    (credited,) = run(spark, store, "2026-09", [Account("alpha", SMALL, (), credits)]).invoices
    lines = [line for line in credited["lines"] if line["code"] == "credit"]
    assert [line["amount_cents"] for line in lines] == [-500, -(plain["total_cents"] - 500)]
    assert credited["total_cents"] == 0
    assert credited["input_checksum"] != plain["input_checksum"]


def test_job_executions_are_billed_where_used_and_change_no_other_invoice(spark, tmp_path):
    """A tenant's job executions (the `jobs` writer's rows) get an invoice line, at the list
    price when the price book predates them; a tenant without jobs gets the very bytes it got
    before job executions were billed (its rows carry no such column, as a broker writes them)."""
    at = SEPTEMBER + timedelta(days=2)
    old_style = [
        {
            k: v
            for k, v in row(t, at, messages=40, connection_minutes=9).items()
            if k != "job_executions"
        }
        for t in ("alpha", "beta")
    ]
    without, with_jobs = LocalObjectStore(tmp_path / "a"), LocalObjectStore(tmp_path / "b")
    for store in (without, with_jobs):
        write_rows(store, old_style, "broker-a")
    write_rows(with_jobs, [row("alpha", at, "jobs", job_executions=1500)], "jobs")
    accounts = [Account("alpha", SMALL), Account("beta", SMALL)]
    before = run(spark, without, "2026-09", accounts).invoices
    alpha, beta = run(spark, with_jobs, "2026-09", accounts).invoices
    assert canonical_json(beta) == canonical_json(before[1])
    assert "job_executions" not in canonical_json(before[0]).decode()
    line = lines_by_code(alpha)["job_executions"]
    assert (line["quantity"], line["amount_cents"]) == (1500, 450)  # $0.003 each, list price
    assert alpha["usage"]["job_executions"] == 1500 and "list_prices" in alpha["inputs"]
    assert alpha["total_cents"] == before[0]["total_cents"] + 450

"""Prices and invoices: a price book, quantities for a period → an invoice document, to the cent.

Shared by the billing job (which computes the quantities from the usage log), the control plane
(price book validation, the plan page, the month-to-date estimate) and the tests.

A price book (`PriceBook.as_document()`) is
`{plan, version, effective_from, currency, base_fee_cents, dimensions}` with, per dimension,
`{"included": N, "per": P, "tiers": [{"up_to": Q | null, "price": "1.00"}, ...]}`: the first N
units of a period are free (the free tier); the rest — the billable units — are priced tier by
tier, a tier taking the billable units up to its cumulative bound `up_to` (null: no bound) at
`price` per P units, `price` being decimal text in the currency's major unit (dollars).

Rounding, the one rule: every amount is first computed exactly (Python `Decimal`, no binary
floating point anywhere); each *line* is then rounded once to integer cents, half up (0.5 cent →
1 cent, -0.5 → -1); the total is the sum of the rounded lines. Nothing else is ever rounded.

Base fee: the whole monthly fee for a tenant on one plan all period. A tenant that starts, or
changes plan, during the period pays each plan's fee prorated by days: fee × days held / days in
the month, whole UTC calendar days, the day of the start or change counted in full for the new
plan (and not for the old one), one line per plan held, each rounded half up to the cent like
every line (`prorated_base_fee_line`). Usage is priced with the price book of the plan held at
the end of the period.

Dimensions added after invoices were first issued (`ADDED_DIMENSIONS`: job executions, device
shadow operations, data delivered to bucket sinks) keep every invoice of a tenant that does not
use them byte for byte what it was: such a dimension has a line, and a figure in the invoice's
`usage`, only in a period it was used, priced by the price book when the book names it, else by
its list price here (`LATER_DIMENSIONS`: a book older than the dimension), whose checksum then
joins the invoice's `inputs` as `list_prices`. A later dimension that was metered before it was
priced (`BOOK_ONLY_DIMENSIONS`: shadow operations, the data delivered to bucket sinks) is priced
only by a book that names it: with a book that does not it has neither line nor figure. Bucket
sinks' data has no list price: no plan's book names it until an operator prices it
(`manage.py set_price PLAN --from … --set sink_gb.tiers=:PRICE`).

Storage is metered in byte-hours and billed in GB-hours (10^9 bytes × 1 hour), exactly:
`storage_gb_hours = storage_byte_hours / 10^9` as a decimal with up to 9 places; the data
delivered to bucket sinks likewise in bytes and billed in GB: `sink_gb = sink_bytes / 10^9`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation, localcontext
from typing import Any

# The billed dimensions, in invoice order, with the usage-log column each is summed from.
DIMENSIONS = (
    "messages",
    "connection_minutes",
    "rules_triggered",
    "actions_executed",
    "storage_gb_hours",
    "job_executions",
    "shadow_operations",
    "sink_gb",
)
USAGE_COLUMN = {
    "messages": "messages",
    "connection_minutes": "connection_minutes",
    "rules_triggered": "rules_triggered",
    "actions_executed": "actions_executed",
    "storage_gb_hours": "storage_byte_hours",
    "job_executions": "job_executions",
    "shadow_operations": "shadow_operations",
    "sink_gb": "sink_bytes",
}
# Dimensions priced since after invoices were first issued, with their list prices (AWS IoT
# Device Management's, US East: $0.003 per remote action, i.e. per job execution on a device;
# AWS IoT Device Shadow's: $1.25 per million operations, metered in 1 KB increments).
LATER_DIMENSIONS: dict[str, dict[str, Any]] = {
    "job_executions": {"included": 0, "per": 1000, "tiers": [{"up_to": None, "price": "3.00"}]},
    "shadow_operations": {
        "included": 0,
        "per": 1_000_000,
        "tiers": [{"up_to": None, "price": "1.25"}],
    },
}
# Later dimensions metered before they were priced (shadow operations were in the usage log long
# before issue 44 priced them): priced only by a price book that names them, never at list price,
# so a period priced with an older book bills them neither on its invoice nor, late, as an
# adjustment; and its invoice document stays byte for byte what it was (no usage figure).
# Migration 0035 gives every plan a book naming shadow operations from its first month not yet
# invoiced. The bytes bucket sinks took (issue 47, as Kinesis Data Firehose meters GB ingested)
# have no list price and no such migration: metered and shown in usage, billed only where an
# operator's price book names `sink_gb`.
BOOK_ONLY_DIMENSIONS = frozenset({"shadow_operations", "sink_gb"})
# Every dimension added after invoices were first issued: a line and a usage figure only in a
# period that used it (and, for the book-only ones, whose book prices it).
ADDED_DIMENSIONS = frozenset(LATER_DIMENSIONS) | BOOK_ONLY_DIMENSIONS
# Metered in bytes, billed in GB (10^9 bytes), exactly.
GB_DIMENSIONS = frozenset({"storage_gb_hours", "sink_gb"})
LINE_CODES = ("base_fee", *DIMENSIONS, "adjustment", "credit")
DESCRIPTIONS = {
    "base_fee": "Monthly base fee",
    "messages": "Messages (5 KB units)",
    "connection_minutes": "Connection minutes",
    "rules_triggered": "Rules triggered (5 KB units)",
    "actions_executed": "Actions executed",
    "storage_gb_hours": "Storage (GB-hours)",
    "job_executions": "Job executions (remote actions)",
    "shadow_operations": "Device shadow operations (1 KB units)",
    "sink_gb": "Data delivered to bucket sinks (GB)",
}
ROUNDING_RULE = "each line rounded half-up to the cent from its exact decimal amount; total = sum"
BYTES_PER_GB = 10**9


class PriceBookError(ValueError):
    """A price book that cannot price: `fields` maps each bad field to what is wrong."""

    def __init__(self, fields: dict[str, str]) -> None:
        super().__init__("; ".join(f"{k}: {v}" for k, v in fields.items()))
        self.fields = fields


def validate_price_book(dimensions: dict[str, Any], currency: str, base_fee_cents: int) -> None:
    """Raise PriceBookError naming every problem of a price book's prices."""
    errors: dict[str, str] = {}
    if not (isinstance(currency, str) and len(currency) == 3 and currency.isalpha()):
        errors["currency"] = "use a three-letter ISO 4217 code, e.g. USD"
    if not isinstance(base_fee_cents, int) or base_fee_cents < 0:
        errors["base_fee_cents"] = "use a whole number of cents, 0 or more"
    unknown = set(dimensions) - set(DIMENSIONS)
    if unknown:
        errors["dimensions"] = f"unknown {sorted(unknown)}; known: {', '.join(DIMENSIONS)}"
    for name, spec in dimensions.items():
        if name in unknown:
            continue
        where = f"dimensions.{name}"
        if not isinstance(spec, dict):
            errors[where] = "use an object {included, per, tiers}"
            continue
        included, per, tiers = spec.get("included", 0), spec.get("per", 1), spec.get("tiers")
        if not isinstance(included, int) or included < 0:
            errors[f"{where}.included"] = "use a whole number, 0 or more"
        if not isinstance(per, int) or per < 1:
            errors[f"{where}.per"] = "use a whole number, 1 or more"
        if not isinstance(tiers, list) or not tiers:
            errors[f"{where}.tiers"] = "give at least one tier {up_to, price}"
            continue
        last = 0
        for i, tier in enumerate(tiers):
            at = f"{where}.tiers[{i}]"
            up_to = tier.get("up_to") if isinstance(tier, dict) else None
            try:
                price = Decimal(str(tier["price"]))
                if price < 0 or not price.is_finite():
                    raise InvalidOperation
            except (KeyError, TypeError, InvalidOperation):
                errors[f"{at}.price"] = 'use a decimal number as text, 0 or more, e.g. "1.00"'
            if up_to is None:
                if i != len(tiers) - 1:
                    errors[f"{at}.up_to"] = "only the last tier may be unbounded (null)"
            elif not isinstance(up_to, int) or up_to <= last:
                errors[f"{at}.up_to"] = "bounds must be whole numbers, increasing"
            else:
                last = up_to
        if tiers and isinstance(tiers[-1], dict) and tiers[-1].get("up_to") is not None:
            errors[f"{where}.tiers"] = "the last tier must be unbounded (up_to: null)"
    if errors:
        raise PriceBookError(errors)


def round_cents(amount: Decimal) -> int:
    """An exact amount in major units → integer cents, half up (away from zero on .5)."""
    return int((amount * 100).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def quantity_of(dimension: str, usage_total: int) -> Decimal:
    """The billed quantity of a dimension from its usage-log column's sum."""
    if dimension in GB_DIMENSIONS:
        return Decimal(usage_total) / BYTES_PER_GB
    return Decimal(usage_total)


@dataclass(frozen=True)
class Priced:
    quantity: Decimal
    included: Decimal
    billable: Decimal
    amount: Decimal  # exact, major units
    tiers: list[dict[str, Any]]


def price_dimension(quantity: Decimal, spec: dict[str, Any]) -> Priced:
    """Price `quantity` units of one dimension by its spec (see the module docstring)."""
    with localcontext() as ctx:
        ctx.prec = 60  # exact for any realistic quantity × price
        included = min(quantity, Decimal(spec.get("included", 0)))
        billable = quantity - included
        per = Decimal(spec.get("per", 1))
        amount = Decimal(0)
        used = Decimal(0)
        tiers = []
        for tier in spec["tiers"]:
            bound = tier.get("up_to")
            cap = billable if bound is None else min(billable, Decimal(bound))
            take = max(Decimal(0), cap - used)
            if take > 0:
                price = Decimal(str(tier["price"]))
                part = take * price / per
                amount += part
                tiers.append({"quantity": _num(take), "price": str(tier["price"]), "per": int(per)})
            used += take
            if used >= billable:
                break
    return Priced(quantity, included, billable, amount, tiers)


def _num(value: Decimal) -> int | float:
    """A quantity for JSON: an integer when whole, else a float (at most 9 decimal places, whose
    shortest repr is deterministic)."""
    if value == value.to_integral_value():
        return int(value)
    return float(value)


def dimension_line(dimension: str, quantity: Decimal, spec: dict[str, Any]) -> dict[str, Any]:
    priced = price_dimension(quantity, spec)
    first = spec["tiers"][0]
    unit_price = priced.tiers[0]["price"] if priced.tiers else str(first["price"])
    return {
        "code": dimension,
        "description": DESCRIPTIONS[dimension],
        "quantity": _num(priced.quantity),
        "included": _num(priced.included),
        "billable": _num(priced.billable),
        "unit_price": unit_price,
        "per": int(spec.get("per", 1)),
        "tiers": priced.tiers,
        "amount_cents": round_cents(priced.amount),
    }


def canonical_json(document: Any) -> bytes:
    """The one byte form of a document: sorted keys, no spaces, UTF-8. Same input, same bytes."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def price_book_checksum(price_book: dict[str, Any]) -> str:
    return sha256_hex(canonical_json(price_book))


def prorated_base_fee_line(
    *, base_fee_cents: int, plan: str, first_day: str, last_day: str, period_days: int
) -> dict[str, Any]:
    """The base fee of a plan held for part of a period, by days: `days / period_days` of the
    monthly fee, the days counted in whole UTC calendar days from `first_day` to `last_day`
    inclusive (the day a tenant starts or changes plan counts for the new plan, in full),
    computed exactly and rounded once, half up, to the cent (the one rounding rule)."""
    days = (date.fromisoformat(last_day) - date.fromisoformat(first_day)).days + 1
    if not 0 < days <= period_days:
        raise ValueError(f"{first_day}..{last_day} is not 1..{period_days} days of the period")
    exact = Decimal(base_fee_cents) * days / period_days / 100
    return {
        "code": "base_fee",
        "description": (
            f"Monthly base fee, plan {plan}, {days} of {period_days} days "
            f"({first_day} to {last_day})"
        ),
        "quantity": days,
        "included": 0,
        "billable": days,
        "unit_price": str(Decimal(base_fee_cents) / 100),
        "per": period_days,
        "tiers": [],
        "amount_cents": round_cents(exact),
    }


def base_fee_lines(
    price_book: dict[str, Any], terms: Sequence[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """The base fee: one full-month line, or, when the tenant started or changed plan during the
    period, one prorated line per plan held (`terms`: `{"plan", "base_fee_cents", "first_day",
    "last_day", "period_days"}`, see `prorated_base_fee_line`)."""
    if terms:
        return [prorated_base_fee_line(**term) for term in terms]
    return [
        {
            "code": "base_fee",
            "description": DESCRIPTIONS["base_fee"],
            "quantity": 1,
            "included": 0,
            "billable": 1,
            "unit_price": str(Decimal(price_book["base_fee_cents"]) / 100),
            "per": 1,
            "tiers": [],
            "amount_cents": int(price_book["base_fee_cents"]),
        }
    ]


def spec_of(dimension: str, price_book: dict[str, Any], total: int) -> dict[str, Any] | None:
    """How `dimension` is priced for a period whose usage-log sum is `total`: by the price book,
    or for a later dimension its list price; None when it has no line (a dimension the book
    does not price; a later dimension not used)."""
    spec: dict[str, Any] | None = price_book["dimensions"].get(dimension)
    if dimension in ADDED_DIMENSIONS:
        if not total or (spec is None and dimension in BOOK_ONLY_DIMENSIONS):
            return None
        return spec or LATER_DIMENSIONS[dimension]
    return spec


def _list_priced(usage: dict[str, int], price_book: dict[str, Any]) -> dict[str, Any]:
    """The later dimensions used and priced at list price (the book predates them)."""
    return {
        d: spec
        for d, spec in LATER_DIMENSIONS.items()
        if int(usage.get(USAGE_COLUMN[d], 0))
        and d not in price_book["dimensions"]
        and d not in BOOK_ONLY_DIMENSIONS
    }


def invoice_lines(
    usage: dict[str, int], price_book: dict[str, Any], terms: Sequence[dict[str, Any]] = ()
) -> list[dict[str, Any]]:
    """The base fee and one line per priced dimension, from the period's usage-log sums."""
    lines = base_fee_lines(price_book, terms)
    for dimension in DIMENSIONS:
        total = int(usage.get(USAGE_COLUMN[dimension], 0))
        spec = spec_of(dimension, price_book, total)
        if spec is None:
            continue  # not priced by this plan (or a later dimension not used)
        lines.append(dimension_line(dimension, quantity_of(dimension, total), spec))
    return lines


def build_invoice(
    *,
    tenant: str,
    period: str,
    usage: dict[str, int],
    usage_digest: str,
    price_book: dict[str, Any],
    adjustments: Sequence[dict[str, Any]] = (),
    credits: Sequence[dict[str, Any]] = (),
    terms: Sequence[dict[str, Any]] = (),
) -> dict[str, Any]:
    """The invoice document of one tenant and period. Deterministic: no clock, no randomness;
    `canonical_json` of it is the invoice's byte form and its SHA-256 the `checksum`.

    `credits` (`{"amount_cents", "reason"}`, in the order given) are negative `credit` lines,
    each applied up to what is still owed: a credit never makes the total negative."""
    lines = invoice_lines(usage, price_book, terms) + list(adjustments)
    owed = sum(line["amount_cents"] for line in lines)
    for credit in credits:
        applied = min(int(credit["amount_cents"]), max(0, owed))
        owed -= applied
        lines.append(
            {
                "code": "credit",
                "description": f"Credit: {credit['reason']}",
                "quantity": 1,
                "included": 0,
                "billable": 1,
                "unit_price": str(Decimal(-applied) / 100),
                "per": 1,
                "tiers": [],
                "granted_cents": int(credit["amount_cents"]),
                "amount_cents": -applied,
            }
        )
    book_sum = price_book_checksum(price_book)
    inputs = {
        "usage": usage_digest,
        "price_book": book_sum,
        "adjustments": sha256_hex(canonical_json(list(adjustments))),
        "credits": sha256_hex(canonical_json(list(credits))),
    }
    if terms:  # only when prorated, so full-month invoices keep their checksums
        inputs["terms"] = sha256_hex(canonical_json(list(terms)))
    listed = _list_priced(usage, price_book)
    if listed:  # only when used, so invoices without them keep their checksums
        inputs["list_prices"] = sha256_hex(canonical_json(listed))
    later = {USAGE_COLUMN[d] for d in ADDED_DIMENSIONS}
    unpriced = {  # metered before priced, and this book does not price them: no figure
        USAGE_COLUMN[d] for d in BOOK_ONLY_DIMENSIONS if d not in price_book["dimensions"]
    }
    document = {
        "tenant": tenant,
        "period": period,
        "currency": price_book["currency"],
        "price_book": {"plan": price_book["plan"], "version": price_book["version"]},
        "usage": {
            k: int(usage.get(k, 0))
            for k in sorted(set(USAGE_COLUMN.values()))
            if k not in unpriced and (k not in later or int(usage.get(k, 0)))
        },
        "lines": lines,
        "total_cents": sum(line["amount_cents"] for line in lines),
        "rounding": ROUNDING_RULE,
        "inputs": inputs,
        "input_checksum": sha256_hex(canonical_json(inputs)),
    }
    return document


def adjustment_lines(
    *,
    period: str,
    fresh_usage: dict[str, int],
    billed_usage: dict[str, int],
    price_book: dict[str, Any],
) -> list[dict[str, Any]]:
    """Late usage of an issued `period`, as adjustment lines for a later invoice: per dimension,
    the difference between pricing what the log holds now and pricing what was billed so far
    (`billed_usage`: the issued invoice's usage plus the deltas of adjustments since), both with
    the period's own price book, so tiers crossed late are priced as they would have been."""
    out = []
    for dimension in DIMENSIONS:
        column = USAGE_COLUMN[dimension]
        fresh, billed = int(fresh_usage.get(column, 0)), int(billed_usage.get(column, 0))
        spec = spec_of(dimension, price_book, max(fresh, billed))
        if spec is None or fresh == billed:
            continue
        now = dimension_line(dimension, quantity_of(dimension, fresh), spec)
        then = dimension_line(dimension, quantity_of(dimension, billed), spec)
        amount = now["amount_cents"] - then["amount_cents"]
        delta = quantity_of(dimension, fresh - billed)
        out.append(
            {
                "code": "adjustment",
                "description": f"Late usage for {period}: {DESCRIPTIONS[dimension]}",
                "for_period": period,
                "dimension": dimension,
                "usage_delta": fresh - billed,
                "quantity": _num(delta),
                "included": 0,
                "billable": _num(delta),
                "unit_price": now["unit_price"],
                "per": now["per"],
                "tiers": [],
                "amount_cents": amount,
            }
        )
    return out

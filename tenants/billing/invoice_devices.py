"""An invoice's metered lines by device (issue 33, point 4): the CSV's per-device drill-down.

The bill is priced per tenant (the usage log has no device column); the brokers also meter each
device's message units and connection minutes per UTC day (`DeviceUsage`, written in the same
transaction as the tenant's minutes), and the rules job the rule evaluations and actions each
device's messages caused. For each line of a dimension metered per device (`messages`,
`connection_minutes`, `rules_triggered`, `actions_executed`) this takes the period's per-device
units and shares the line's
amount among the devices in proportion to their units, in whole cents that add up to the line
exactly: each device gets the floor of its exact share, and the cents left over go one each to the
largest remainders (ties in the rows' order: most units first, then the name) — the largest
remainder method. The line's amount, and so every total, is the invoice's own, never recomputed.

Units of the line that no device row holds (usage from before per-device metering began) form one
row of their own, `UNRECORDED`, so the shares still sum to the line; if the device rows hold more
units than the line (the line is the usage log's, the rows Postgres's: they agree unless one of
them lost minutes), the amount is shared over the device rows alone. Adjustment lines (a past
month's late usage) are not broken down.

The per-device units are read once, when the invoice is issued, and kept on it
(`Invoice.device_units`, set by `tenants.billing.invoicing.finalize`): an issued invoice's CSV is made
from that snapshot, so a device row written later (a broker's late flush, the month's usage going
on after an invoice issued with `--force`) never changes the file. An invoice issued before the
snapshot existed has none: its drill-down is read from `DeviceUsage` when the CSV is made.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db.models import Sum

from tenants.billing.periods import period_bounds
from tenants.models import DeviceUsage, Invoice

# Line code -> the DeviceUsage column that meters it per device.
PER_DEVICE_COLUMNS = {
    "messages": "message_units",
    "connection_minutes": "connection_minutes",
    "rules_triggered": "rules_triggered",
    "actions_executed": "actions_executed",
}
UNRECORDED = None  # the row for units of the line that no device row holds


@dataclass(frozen=True)
class DeviceShare:
    device: str | None  # the name the device connected with; UNRECORDED for the rest
    quantity: int
    amount_cents: int


def split_cents(amount_cents: int, weights: list[int]) -> list[int]:
    """`amount_cents` shared in proportion to `weights` (whole, ≥ 0, not all 0), in whole cents
    that add up to it exactly: floors first, then one cent each to the largest remainders, ties
    to the earlier weight."""
    total = sum(weights)
    if total <= 0 or any(w < 0 for w in weights):
        raise ValueError("weights must be whole, at least 0, and not all 0")
    if amount_cents < 0:
        return [-share for share in split_cents(-amount_cents, weights)]
    shares = [amount_cents * w // total for w in weights]
    left = amount_cents - sum(shares)
    by_remainder = sorted(
        range(len(weights)), key=lambda i: (-(amount_cents * weights[i] % total), i)
    )
    for i in by_remainder[:left]:
        shares[i] += 1
    return shares


def device_units(*, invoice: Invoice) -> dict[str, dict[str, int]]:
    """Per line code metered per device, each device's units in the invoice's period (devices
    with none left out): {code: {device: units}}, as `DeviceUsage` holds them now. Only the
    invoice's own tenant's rows."""
    start, end = period_bounds(invoice.period)
    rows = (
        DeviceUsage.objects.filter(
            tenant_id=invoice.tenant_id, day__gte=start.date(), day__lt=end.date()
        )
        .values("device")
        .annotate(**{code: Sum(column) for code, column in PER_DEVICE_COLUMNS.items()})
    )
    out: dict[str, dict[str, int]] = {code: {} for code in PER_DEVICE_COLUMNS}
    for row in rows:
        for code in PER_DEVICE_COLUMNS:
            if row[code]:
                out[code][row["device"]] = int(row[code])
    return out


def line_shares(line: dict[str, Any], units: dict[str, int]) -> list[DeviceShare]:
    """One line's drill-down: the devices, most units first (then by name), each with its units
    and its share of the line's amount; the `UNRECORDED` rest last. Empty without units."""
    devices = sorted(units.items(), key=lambda item: (-item[1], item[0]))
    recorded = sum(count for _, count in devices)
    rest = max(0, int(line.get("quantity") or 0) - recorded)
    rows: list[tuple[str | None, int]] = [*devices, *([(UNRECORDED, rest)] if rest else [])]
    if not rows:
        return []
    cents = split_cents(int(line.get("amount_cents", 0)), [count for _, count in rows])
    return [
        DeviceShare(device, count, share)
        for (device, count), share in zip(rows, cents, strict=True)
    ]


def invoice_drilldown(invoice: Invoice) -> list[tuple[dict[str, Any], list[DeviceShare]]]:
    """Each line metered per device, in the invoice's order, with its devices' shares: from the
    units kept when it was issued, or (issued before they were kept) from `DeviceUsage` now."""
    lines = [line for line in invoice.line_items if line.get("code") in PER_DEVICE_COLUMNS]
    if not lines:
        return []
    units = (
        invoice.device_units if invoice.device_units is not None else device_units(invoice=invoice)
    )
    drilled = [(line, line_shares(line, units.get(line["code"], {}))) for line in lines]
    return [(line, shares) for line, shares in drilled if shares]

"""An invoice line in words, as a finance team reads it: "Messages (per million, 5 KB units)",
"1.00 USD per million", "4,500,000".

The billing job's lines keep their codes and their own short descriptions (they are part of the
checksummed document); the PDF, the CSV, the portal and the API's `label`/`unit` say them so."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

# Each billed dimension: its name, and the unit its quantity counts ("" when the name says it).
DIMENSIONS: dict[str, tuple[str, str]] = {
    "messages": ("Messages", "5 KB units"),
    "connection_minutes": ("Connection minutes", ""),
    "rules_triggered": ("Rules triggered", "5 KB units"),
    "actions_executed": ("Rule actions executed", ""),
    "storage_gb_hours": ("Storage", "GB-hours"),
    "job_executions": ("Job executions", "remote actions"),
    "shadow_operations": ("Device shadow operations", "1 KB units"),
    "sink_gb": ("Data delivered to bucket sinks", "GB"),
}
UNITS = {
    "messages": "messages (5 KB units)",
    "connection_minutes": "minutes",
    "rules_triggered": "rule runs (5 KB units)",
    "actions_executed": "actions",
    "storage_gb_hours": "GB-hours",
    "job_executions": "job executions",
    "shadow_operations": "shadow operations (1 KB units)",
    "sink_gb": "GB",
}
# Usage that is the tenant's but no device's of its own, in words (devices never take `$` names):
# the names the brokers meter it under (`DeviceUsage.device`).
DEVICE_LABELS = {
    "$console": "Browser client (console)",
    "$viewer": "Browser client (viewer)",
    "$rules": "Rules republishing",
    "$claim": "Fleet provisioning (claim certificates)",
    "": "Device not recorded (a will restored after a broker restart, rules on a shadow change "
    "made through the REST API)",
}
PER_WORDS = {1_000: "thousand", 1_000_000: "million", 1_000_000_000: "billion"}


def money(cents: int, currency: str) -> str:
    """12345, "USD" → "123.45 USD"."""
    sign = "-" if cents < 0 else ""
    return f"{sign}{abs(cents) // 100:,}.{abs(cents) % 100:02d} {currency}"


def per_words(per: int) -> str:
    """A price's batch in words: 1 → "", 1,000,000 → "million", 250 → "250"."""
    if per == 1:
        return ""
    return PER_WORDS.get(per, f"{per:,}")


def dimension_label(dimension: str, per: int) -> str:
    name, unit = DIMENSIONS.get(dimension, (dimension.replace("_", " ").capitalize(), ""))
    parts = [f"per {per_words(per)}"] if per != 1 else []
    parts += [unit] if unit else []
    return f"{name} ({', '.join(parts)})" if parts else name


def line_label(line: dict[str, Any]) -> str:
    """What the line bills, in words with its unit."""
    code = line.get("code", "")
    per = int(line.get("per") or 1)
    if code in DIMENSIONS:
        return dimension_label(code, per)
    if code == "adjustment":
        what = dimension_label(line.get("dimension", ""), per)
        return f"Late usage for {line.get('for_period', '?')}: {what}"
    return str(line.get("description") or code)  # the base fee, a credit: already words


def line_unit(line: dict[str, Any]) -> str:
    code = line.get("code", "")
    if code == "base_fee":
        return "days" if int(line.get("per") or 1) > 1 else "month"
    if code == "adjustment":
        return UNITS.get(line.get("dimension", ""), "")
    return UNITS.get(code, "")


def quantity_text(value: Any) -> str:
    """4500000 → "4,500,000"; 12.5 → "12.5" (no float noise)."""
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        return str(value)
    if number == number.to_integral_value():
        return f"{int(number):,}"
    return f"{number.normalize():,f}"


def price_text(unit_price: Any, currency: str, per: int = 1) -> str:
    """ "1.00" per 1,000,000 → "1.00 USD per million"; "0.0002" → "0.0002 USD"."""
    try:
        price = Decimal(str(unit_price))
    except InvalidOperation:
        return str(unit_price)
    shown = f"{price:,.2f}" if price == price.quantize(Decimal("0.01")) else f"{price:,f}"
    batch = per_words(per)
    if batch and per in PER_WORDS:
        return f"{shown} {currency} per {batch}"
    return f"{shown} {currency} per {per:,}" if per != 1 else f"{shown} {currency}"


def line_price_text(line: dict[str, Any], currency: str) -> str:
    """The line's unit price in words ("49.00 USD per 30 days" for a prorated base fee)."""
    per = int(line.get("per") or 1)
    text = price_text(line.get("unit_price", ""), currency, per)
    if line.get("code") == "base_fee" and per > 1:
        text += " days"
    return text


def line_words(line: dict[str, Any], currency: str) -> dict[str, str]:
    """The line's cells as a person reads them."""
    return {
        "label": line_label(line),
        "unit": line_unit(line),
        "quantity": quantity_text(line.get("quantity", "")),
        "included": quantity_text(line.get("included", "")),
        "billable": quantity_text(line.get("billable", "")),
        "price": line_price_text(line, currency),
        "amount": money(int(line.get("amount_cents", 0)), currency),
    }

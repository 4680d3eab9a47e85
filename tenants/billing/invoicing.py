"""Issuing an invoice: its number, who issued it to whom, its dates and its tax, set once.

Numbers are sequential per issuer (`INVOICE_ISSUER["key"]`) and never given twice: issuing locks
the issuer's `InvoiceCounter` row first (before any invoice row, so two issuing transactions
never wait on each other in opposite orders) and takes the next number in the same transaction
as the invoice it numbers. A transaction that rolls back gives its number back with it, so
there are no gaps either; a number is never derived from the invoices that exist (a tenant's
deletion takes its invoices with it, never the numbers they had).

The issuer (settings) and the tenant's billing details are copied onto the invoice as they are
when it is issued: an issued invoice reads the same forever, whatever changes later; so are the
per-device units of its CSV's drill-down (`Invoice.device_units`). The tax is
`INVOICE_TAX_RATE` percent of the lines' total, rounded half up to the cent (the one rounding
rule of `common.charges.pricing`); the billing job's document and its checksum stay as the job made them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, ValidationError
from django.db import connection, transaction
from django.utils import timezone

from common.charges.pricing import round_cents
from tenants.billing.invoice_devices import device_units
from tenants.models import BillingDetails, Invoice, InvoiceCounter, Tenant


def issuer() -> dict[str, Any]:
    """The issuer as configured now: `key`, `name`, `address` (lines), `tax_id`, `email`."""
    conf = settings.INVOICE_ISSUER
    return {
        "key": conf["key"],
        "name": conf["name"],
        "address": [line.strip() for line in conf.get("address", "").splitlines() if line.strip()],
        "tax_id": conf.get("tax_id", ""),
        "email": conf.get("email", ""),
    }


def tax_rate() -> Decimal:
    try:
        rate = Decimal(str(settings.INVOICE_TAX_RATE))
    except InvalidOperation:
        rate = Decimal(-1)
    if not rate.is_finite() or not 0 <= rate < 100:
        raise ImproperlyConfigured(
            f"INVOICE_TAX_RATE={settings.INVOICE_TAX_RATE!r}: use a percentage from 0 to "
            "under 100, e.g. 20 or 8.875."
        )
    return rate


def tax_cents(total_cents: int, rate: Decimal) -> int:
    """`rate` percent of `total_cents`, rounded once, half up, to the cent."""
    return round_cents(Decimal(total_cents) / 100 * rate / 100)


def billed_to(tenant: Tenant) -> dict[str, Any]:
    """The tenant's billing details as an invoice shows them (its name when it gave none)."""
    details = BillingDetails.objects.filter(tenant=tenant).first()
    name = (details.company_name if details else "") or tenant.name or tenant.slug
    return {
        "tenant": tenant.slug,
        "company_name": name,
        "address": [
            line.strip() for line in (details.address if details else "").splitlines() if line
        ],
        "country": details.country if details else "",
        "tax_id": details.tax_id if details else "",
        "email": details.email if details else "",
        "purchase_order": details.purchase_order if details else "",
    }


def numbering_lock(key: str | None = None) -> InvoiceCounter:
    """The issuer's counter row, locked until the caller's transaction ends (made if new)."""
    key = key or settings.INVOICE_ISSUER["key"]
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tenants_invoicecounter (issuer_key, last_number) VALUES (%s, 0) "
            "ON CONFLICT (issuer_key) DO NOTHING",
            [key],
        )
    return InvoiceCounter.objects.select_for_update().get(issuer_key=key)


def finalize(invoice: Invoice, counter: InvoiceCounter, *, now: datetime | None = None) -> Invoice:
    """Number an invoice being issued and copy what it must say forever (the caller holds
    `counter` locked: `numbering_lock`, in the same transaction)."""
    if invoice.number:
        return invoice
    now = now or timezone.now()
    rate = tax_rate()
    counter.last_number += 1
    counter.save(update_fields=["last_number"])
    who = issuer()
    day = now.astimezone(UTC).date()
    invoice.issuer_key = counter.issuer_key
    invoice.number = f"{settings.INVOICE_NUMBER_PREFIX}{counter.last_number:06d}"
    invoice.issuer = who
    invoice.billed_to = billed_to(invoice.tenant)
    invoice.issue_date = day
    invoice.due_date = day + timedelta(days=settings.INVOICE_DUE_DAYS)
    invoice.tax_name = settings.INVOICE_TAX_NAME if rate else ""
    invoice.tax_rate = rate
    invoice.tax_cents = tax_cents(invoice.total_cents, rate)
    # The drill-down's units as they stand now, kept: the CSV never changes after this.
    invoice.device_units = device_units(invoice=invoice)
    invoice.status = Invoice.Status.ISSUED
    invoice.issued_at = invoice.issued_at or now
    invoice.save()
    return invoice


@transaction.atomic
def invoice_issue(invoice_id: int) -> Invoice:
    """Issue one draft as it stands (numbered, dated, taxed)."""
    counter = numbering_lock()
    invoice = (
        Invoice.objects.select_for_update(of=("self",)).select_related("tenant").get(id=invoice_id)
    )
    if invoice.status != Invoice.Status.DRAFT:
        raise ValidationError(
            {"status": [f"Invoice {invoice.period} is already {invoice.status}."]}
        )
    return finalize(invoice, counter)


@transaction.atomic
def drafts_issue(period: str) -> int:
    """Issue every draft of the period as it stands, numbered in tenant order."""
    counter = numbering_lock()
    drafts = (
        Invoice.objects.select_for_update(of=("self",))
        .select_related("tenant")
        .filter(period=period, status=Invoice.Status.DRAFT)
        .order_by("tenant__slug")
    )
    issued = 0
    for invoice in drafts:
        finalize(invoice, counter)
        issued += 1
    return issued

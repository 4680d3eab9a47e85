"""Billing: price books, invoices and their numbering, whom they are addressed to, credits, and
the plan changes a base fee is prorated by; reads and writes are `tenants.billing`."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from tenants.audited import AuditedQuerySet
from tenants.models.tenant import Plan, Tenant


class TenantPlanChange(models.Model):
    """A tenant moved from one plan to another, effective from `effective_at` (UTC): the history
    the billing job prorates the base fee with (`common.charges.pricing.prorated_base_fee_line`)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="plan_changes")
    from_plan = models.ForeignKey(Plan, on_delete=models.PROTECT, related_name="+")
    to_plan = models.ForeignKey(Plan, on_delete=models.PROTECT, related_name="+")
    effective_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["tenant", "effective_at", "id"]


class Credit(models.Model):
    """An amount an operator grants a tenant, taken off the invoice of `period` (never below 0)."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="credits")
    period = models.CharField(max_length=7, help_text="YYYY-MM")
    amount_cents = models.PositiveBigIntegerField()
    reason = models.CharField(max_length=200)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["period", "id"]


class PriceBook(models.Model):
    """One version of a plan's prices, applying to periods that start on or after
    `effective_from` (until a later version's date). Issued invoices keep the version they were
    priced with; a new version never rewrites them.

    `dimensions` maps each billed dimension (`messages`, `connection_minutes`,
    `rules_triggered`, `actions_executed`, `storage_gb_hours`) to
    `{"included": N, "per": P, "tiers": [{"up_to": Q | null, "price": "1.00"}, ...]}`:
    the first N units a period are free, then each tier prices the billable units up to its
    cumulative bound `up_to` (null: no bound) at `price` per P units (decimal text, the
    currency's major unit). See `common.charges.pricing`."""

    plan = models.ForeignKey(Plan, on_delete=models.PROTECT, related_name="price_books")
    version = models.PositiveIntegerField()
    effective_from = models.DateField()
    currency = models.CharField(max_length=3, default="USD")
    base_fee_cents = models.BigIntegerField(default=0)
    dimensions = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["plan", "version"], name="pricebook_unique_version"),
            models.UniqueConstraint(
                fields=["plan", "effective_from"], name="pricebook_unique_effective_from"
            ),
        ]
        ordering = ["plan", "-effective_from"]

    def __str__(self) -> str:
        return f"{self.plan.slug} v{self.version} from {self.effective_from}"

    def as_document(self) -> dict:
        """The price book as the billing job reads it (plain JSON)."""
        return {
            "plan": self.plan.slug,
            "version": self.version,
            "effective_from": self.effective_from.isoformat(),
            "currency": self.currency,
            "base_fee_cents": self.base_fee_cents,
            "dimensions": self.dimensions,
        }


class Invoice(models.Model):
    class Status(models.TextChoices):
        DRAFT = "draft"
        ISSUED = "issued"
        PAID = "paid"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invoices")
    period = models.CharField(max_length=7, help_text="YYYY-MM")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.DRAFT)
    currency = models.CharField(max_length=3, default="USD")
    total_cents = models.BigIntegerField(default=0)
    line_items = models.JSONField(default=list, blank=True, help_text="the lines (see document)")
    created_at = models.DateTimeField(default=timezone.now)
    # What the billing job wrote: the canonical JSON document (byte for byte), its SHA-256, the
    # SHA-256 of its inputs (usage log segments read, price book), and the price book version.
    document = models.TextField(blank=True, default="")
    checksum = models.CharField(max_length=64, blank=True, default="")
    input_checksum = models.CharField(max_length=64, blank=True, default="")
    price_book = models.ForeignKey(
        PriceBook, on_delete=models.PROTECT, null=True, blank=True, related_name="invoices"
    )
    price_book_version = models.PositiveIntegerField(null=True, blank=True)
    issued_at = models.DateTimeField(null=True, blank=True)
    # Set once, when the invoice is issued (tenants/billing/invoicing.py), never changed after: the
    # number (sequential per issuer), who issued it to whom as they stood then, the dates and
    # the tax. Invoices issued before numbering existed have none of them.
    issuer_key = models.CharField(max_length=32, blank=True, default="", db_default="")
    number = models.CharField(max_length=40, null=True, blank=True)
    issuer = models.JSONField(default=dict, blank=True, db_default={})
    billed_to = models.JSONField(default=dict, blank=True, db_default={})
    issue_date = models.DateField(null=True, blank=True)
    due_date = models.DateField(null=True, blank=True)
    tax_name = models.CharField(max_length=32, blank=True, default="", db_default="")
    tax_rate = models.DecimalField(
        max_digits=6, decimal_places=3, default=0, db_default=0, help_text="percent"
    )
    tax_cents = models.BigIntegerField(default=0, db_default=0)
    # The per-device units of the metered lines when it was issued ({line code: {device:
    # units}}, `tenants.billing.invoice_devices.device_units`): the CSV's drill-down is made from this,
    # so a device row written later never changes an issued file. None: issued before the
    # snapshot existed (its drill-down is read from `DeviceUsage` when the CSV is made).
    device_units = models.JSONField(null=True, blank=True, default=None)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "period"], name="invoice_unique_period"),
            models.UniqueConstraint(
                fields=["issuer_key", "number"],
                condition=Q(number__isnull=False),
                name="invoice_unique_number",
            ),
        ]
        ordering = ["-period"]

    @property
    def lines(self) -> list[dict]:
        return self.line_items

    def parsed_document(self) -> dict:
        """The billing job's document (lines, usage sums, inputs) as stored, parsed."""
        import json

        return json.loads(self.document) if self.document else {}

    @property
    def total_due_cents(self) -> int:
        """What the tenant pays: the lines' total plus the tax."""
        return self.total_cents + self.tax_cents


class InvoiceCounter(models.Model):
    """The last invoice number of an issuer. Issuing locks this row first (`SELECT … FOR
    UPDATE`) and takes the next number in the same transaction as the invoice, so numbers are
    sequential without gaps and never given twice, however many processes issue at once."""

    issuer_key = models.CharField(max_length=32, primary_key=True)
    last_number = models.BigIntegerField(default=0)


class BillingDetails(models.Model):
    """Who an invoice is addressed to: the tenant's legal name, address, tax id and billing
    contact, copied onto each invoice when it is issued."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="billing_details")
    company_name = models.CharField(max_length=200, blank=True)
    address = models.TextField(blank=True, help_text="street, city, postcode, one per line")
    country = models.CharField(max_length=64, blank=True)
    tax_id = models.CharField(max_length=64, blank=True, help_text="VAT or other tax number")
    email = models.EmailField(blank=True, help_text="where invoices go (finance)")
    purchase_order = models.CharField(max_length=64, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    label = "billing details"  # how the audit log names it

"""Spend control (issue 33): a tenant's monthly budget and the alerts sent for it and for quotas
nearing; reads and writes are `tenants.budgets`."""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.utils import timezone

from tenants.audited import AuditedQuerySet
from tenants.models.tenant import Tenant


class Budget(models.Model):
    """A tenant's monthly budget (issue 33): alerts at `thresholds` percent of `monthly_cents`
    (in the currency of the tenant's price book) and, at 100 %, `at_limit`: notify only, or
    degrade (new CONNECTs refused until the month ends or the budget is lifted)."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    class AtLimit(models.TextChoices):
        NOTIFY = "notify"
        DEGRADE = "degrade"

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="budget")
    monthly_cents = models.PositiveBigIntegerField()
    thresholds = ArrayField(models.PositiveSmallIntegerField(), default=list)
    at_limit = models.CharField(max_length=8, choices=AtLimit.choices, default=AtLimit.NOTIFY)
    webhook_url = models.URLField(max_length=2048, blank=True)
    # Signs the alert webhooks (X-Signature-256, as the rules' webhooks): shown once, stored
    # sealed (common.security.sealed).
    webhook_secret = models.CharField(max_length=512, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    label = "budget"  # how the audit log names it


class BudgetAlert(models.Model):
    """One alert sent (or being sent): a budget threshold crossed, or a quota nearing, in one
    month. Its unique key makes it once per month per threshold and amount, across runs and
    processes: the row is claimed first, then the email and the webhook go out and are
    recorded here."""

    class Kind(models.TextChoices):
        BUDGET = "budget"
        CONNECTIONS = "max_connections"
        INCLUDED_MESSAGES = "included_messages"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="budget_alerts")
    period = models.CharField(max_length=7, help_text="YYYY-MM")
    kind = models.CharField(max_length=24, choices=Kind.choices)
    threshold = models.PositiveSmallIntegerField(help_text="percent")
    limit = models.BigIntegerField(help_text="the budget in cents, or the quota")
    value = models.BigIntegerField(help_text="what was used when it was crossed")
    currency = models.CharField(max_length=3, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    email_to = ArrayField(models.EmailField(), default=list, blank=True)
    email_sent_at = models.DateTimeField(null=True, blank=True)
    email_error = models.CharField(max_length=300, blank=True)
    webhook_url = models.URLField(max_length=2048, blank=True)
    webhook_sent_at = models.DateTimeField(null=True, blank=True)
    webhook_error = models.CharField(max_length=300, blank=True)
    attempts = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "period", "kind", "threshold", "limit"],
                name="budget_alert_once",
            )
        ]

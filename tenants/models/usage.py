"""What a tenant used: per minute (`Usage`, the broker's meter) and per device and day
(`DeviceUsage`), and the usage-log segments of other writers already rolled up; reads are
`tenants.usage`, the roll-up `tenants.billing.services`."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from tenants.models.tenant import Tenant


class Usage(models.Model):
    """Per-tenant usage for one minute, flushed in batches by the broker's metering hook.

    The billable columns (`message_units`, `connection_minutes`, `storage_byte_hours`,
    `rules_triggered`, `actions_executed`, `shadow_operations`, `job_executions`, `sink_bytes`)
    mirror the usage log in the object store, which alone is billed; this table feeds the
    portal's charts and the month-to-date estimate."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="usage")
    minute = models.DateTimeField()
    connection_seconds = models.BigIntegerField(default=0)
    messages_in = models.BigIntegerField(default=0)
    messages_out = models.BigIntegerField(default=0)
    bytes_in = models.BigIntegerField(default=0)
    bytes_out = models.BigIntegerField(default=0)
    dropped = models.JSONField(default=dict, blank=True, help_text="drops by cause")
    # Slowed, not dropped: publishes that waited for the publish rate, deliveries paced by the
    # outbound rate (data_plane.broker.fair, flow). Quota key -> times in this minute.
    throttled = models.JSONField(
        default=dict, db_default={}, blank=True, help_text="slowdowns by quota key"
    )
    retained_count = models.BigIntegerField(default=0)
    stored_bytes = models.BigIntegerField(default=0)
    message_units = models.BigIntegerField(default=0, db_default=0, help_text="5 KiB units")
    connection_minutes = models.BigIntegerField(default=0, db_default=0)
    storage_byte_hours = models.BigIntegerField(default=0, db_default=0)
    rules_triggered = models.BigIntegerField(default=0, db_default=0)
    actions_executed = models.BigIntegerField(default=0, db_default=0)
    # Device shadow operations in AWS's 1 KiB units (data_plane.shadows.metering).
    shadow_operations = models.BigIntegerField(default=0, db_default=0)
    # Job executions queued (AWS's remote actions, retries included: tenants.jobs.metering).
    job_executions = models.BigIntegerField(default=0, db_default=0)
    # JSON bytes of rule outputs bucket (s3) sinks took: the rules job's usage-log `sink_bytes`,
    # added by `tenants.billing.services.usage_log_rollup`.
    sink_bytes = models.BigIntegerField(default=0, db_default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "minute"], name="usage_unique_minute")
        ]
        ordering = ["-minute"]


class DeviceUsage(models.Model):
    """One device's billed usage for one UTC day: the message units it published, received,
    subscribed and connected with, the minutes it was connected, and its shadow operations
    (the thing's: written by the broker's meter beside `Usage`, same transaction); the rule
    evaluations (5 KiB units) and actions its messages caused (the rules job's, rolled up from
    its device segments: `tenants.billing.services.usage_log_rollup`). The bill stays per tenant (the
    usage log), so this is for reading: `GET /api/v1/usage?by=device`, the portal and the invoice
    CSV's drill-down. `device` is the name the device connected with (kept when the device is
    deleted; `$console`/`$viewer` the portal's browser client, `$rules` the tenant's rules
    republishing, "" a will restored after a broker restart, whose device was not kept, or a
    message the rules read with no device: a shadow change made through the REST API)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="device_usage")
    device = models.CharField(max_length=128)
    day = models.DateField()
    message_units = models.BigIntegerField(default=0, help_text="5 KiB units")
    connection_minutes = models.BigIntegerField(default=0)
    # db_default: a broker of the version before writes rows without these columns.
    rules_triggered = models.BigIntegerField(default=0, db_default=0, help_text="5 KiB units")
    actions_executed = models.BigIntegerField(default=0, db_default=0)
    shadow_operations = models.BigIntegerField(default=0, db_default=0, help_text="1 KiB units")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "device", "day"], name="device_usage_unique_day"
            )
        ]
        indexes = [models.Index(fields=["tenant", "day"], name="device_usage_tenant_day")]


class UsageLogImport(models.Model):
    """A usage-log segment of another writer (the rules job) already rolled up into `Usage`, so
    each is added once."""

    key = models.CharField(max_length=512, unique=True)
    imported_at = models.DateTimeField(default=timezone.now)

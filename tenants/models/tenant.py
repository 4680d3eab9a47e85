"""A tenant itself and its plan: the price point and the limits the broker enforces (the quota
keys, `common.contracts.quota_keys`); reads and writes are `tenants.tenant`."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from common.contracts.quota_keys import QUOTA_KEYS
from tenants.audited import AuditedQuerySet
from tenants.models.names import SLUG_VALIDATOR


class Plan(models.Model):
    """A price point and the limits the broker enforces; tenants may override any limit."""

    slug = models.SlugField(max_length=32, unique=True)
    name = models.CharField(max_length=64)
    monthly_price_cents = models.PositiveIntegerField(default=0)
    price_per_million_messages_cents = models.PositiveIntegerField(default=0)
    max_connections = models.PositiveIntegerField(default=100)
    max_publish_rate = models.PositiveIntegerField(default=100, help_text="messages/s per tenant")
    max_inbound_bytes_rate = models.PositiveIntegerField(default=1_000_000, help_text="bytes/s")
    max_outbound_bytes_rate = models.PositiveIntegerField(default=2_000_000, help_text="bytes/s")
    max_message_size = models.PositiveIntegerField(default=262_144, help_text="bytes")
    max_subscriptions_per_client = models.PositiveIntegerField(default=100)
    max_queued_messages = models.PositiveIntegerField(default=1000)
    max_retained_messages = models.PositiveIntegerField(default=1000)
    max_session_expiry = models.PositiveIntegerField(default=86_400, help_text="seconds")
    max_keepalive = models.PositiveIntegerField(default=3600, help_text="seconds")
    max_persistent_sessions = models.PositiveIntegerField(
        default=1000, help_text="sessions kept for offline clients, per tenant"
    )
    max_device_publish_rate = models.PositiveIntegerField(
        default=0,
        help_text="messages/s per device (0: none; devices share the tenant's rate fairly)",
    )
    max_rule_outputs = models.PositiveIntegerField(
        default=100, db_default=100, help_text="outputs of one rule for one message (FOREACH)"
    )
    journey_retention_hours = models.PositiveIntegerField(
        default=24,
        db_default=24,
        help_text="hours the journey (each publish's outcome, each client's events) is kept",
    )
    # History (common/archive/history_policy.py): what a tenant keeps while it has no history policy
    # of its own (all its topics, this many days; 0: nothing), and the limits on its policies.
    history_default_days = models.PositiveIntegerField(
        default=0, db_default=0, help_text="days of all topics kept while a tenant has no policy"
    )
    max_history_days = models.PositiveIntegerField(
        default=1, db_default=1, help_text="days a history policy may keep"
    )
    max_history_policies = models.PositiveIntegerField(
        default=5, db_default=5, help_text="history policies per tenant"
    )
    max_shadow_size = models.PositiveIntegerField(
        default=8192,
        db_default=8192,
        help_text="bytes of one device shadow's state (desired + reported), as AWS counts them",
    )
    shadow_history_days = models.PositiveIntegerField(
        default=30, db_default=30, help_text="days a device shadow's past versions are kept"
    )
    max_shadows = models.PositiveIntegerField(
        default=1_000, db_default=1_000, help_text="device shadows (classic and named) per tenant"
    )
    max_shadow_versions = models.PositiveIntegerField(
        default=100, db_default=100, help_text="past versions kept per device shadow"
    )
    max_certificates = models.PositiveIntegerField(
        default=1_000,
        db_default=1_000,
        help_text="live certificates per tenant: CAs, devices', fleet claims and issued ones",
    )
    max_ca_certificates = models.PositiveIntegerField(
        default=5,
        db_default=5,
        help_text="CA certificates a tenant may have registered (live ones, the fleet CA aside)",
    )
    # Durable shared groups (issue 45): groups a tenant may have, what one group keeps while
    # it has no member (messages and payload bytes), and how long a group without members
    # and its messages are kept.
    max_shared_groups = models.PositiveIntegerField(
        default=100, db_default=100, help_text="shared subscription groups per tenant"
    )
    max_group_messages = models.PositiveIntegerField(
        default=100_000, db_default=100_000, help_text="messages one shared group keeps"
    )
    max_group_bytes = models.PositiveBigIntegerField(
        default=104_857_600, db_default=104_857_600, help_text="payload bytes one group keeps"
    )
    group_retention = models.PositiveIntegerField(
        default=86_400,
        db_default=86_400,
        help_text="seconds a group's messages, and a group without members, are kept",
    )
    # Alarms (issue 46): definitions a tenant may have, and the (alarm, key) states kept for
    # them all together (each key an alarm watches is state the live job checkpoints).
    max_alarms = models.PositiveIntegerField(
        default=20, db_default=20, help_text="alarm definitions per tenant"
    )
    max_alarm_keys = models.PositiveIntegerField(
        default=1_000, db_default=1_000, help_text="alarm states (alarm, key) per tenant"
    )
    # Sinks (issue 47): what one sink's outbox (a rule action's:
    # `tenants.models.sinks.SinkOutbox`) keeps while its far end is down or slow, in outputs and
    # in bytes of their JSON. The rules job reads them (overrides applied) before it queues one
    # more.
    max_sink_outbox_messages = models.PositiveIntegerField(
        default=10_000, db_default=10_000, help_text="outputs one sink's outbox keeps"
    )
    max_sink_outbox_bytes = models.PositiveBigIntegerField(
        default=10_485_760, db_default=10_485_760, help_text="bytes one sink's outbox keeps"
    )

    def __str__(self) -> str:
        return self.name

    def limits(self) -> dict[str, int]:
        return {key: getattr(self, key) for key in QUOTA_KEYS}


class Tenant(models.Model):
    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    class Status(models.TextChoices):
        ACTIVE = "active"
        SUSPENDED = "suspended"

    class AclDefault(models.TextChoices):
        ALLOW = "allow"
        DENY = "deny"

    slug = models.CharField(max_length=32, unique=True, validators=[SLUG_VALIDATOR])
    name = models.CharField(max_length=128, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    plan = models.ForeignKey(Plan, on_delete=models.PROTECT, related_name="tenants")
    quota_overrides = models.JSONField(default=dict, blank=True)
    # What applies when no ACL rule matches; either way a tenant only ever sees its own topics.
    acl_default = models.CharField(max_length=8, choices=AclDefault.choices, default="allow")
    archive_enabled = models.BooleanField(default=True)
    # QoS 0 to a persistent session whose client is offline: dropped (counted) by default, as
    # EMQX does with mqueue_store_qos0 off; on, it waits in the session's queue (in memory).
    queue_qos0_offline = models.BooleanField(default=False)
    # Spend control (tenants/budgets/services.py): the budget's `degrade` is in force, so every broker
    # node refuses the tenant's new CONNECTs (0x97) until it is lifted. Read by the broker
    # (data_plane/tenancy/store.py) with the rest of the tenant policy.
    budget_degraded = models.BooleanField(default=False, db_default=False)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.slug

    @property
    def is_active(self) -> bool:
        return self.status == self.Status.ACTIVE

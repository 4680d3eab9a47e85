"""The tenant domain. The broker reads these tables directly (psycopg), so table and column names
are part of the contract with `data_plane/tenancy/`: change them with a migration on both sides."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from common.contracts.quota_keys import QUOTA_KEYS
from common.security.sealed import open_actions, seal_actions
from tenants.audited import AuditedQuerySet

# Slugs go into MQTT usernames and topic namespaces: keep them boring.
SLUG_VALIDATOR = RegexValidator(
    r"^[a-z0-9](?:[a-z0-9-]{1,30})[a-z0-9]$",
    "Use 3-32 lowercase letters, digits and hyphens, starting and ending with a letter or digit.",
)
RESERVED_SLUGS = frozenset(
    {
        "sys",
        "admin",
        "api",
        "www",
        "root",
        "mqtt",
        "broker",
        "static",
        "portal",
        "internal",
        "system",
        "share",
        "events",
        "support",
        "billing",
        "status",
        "docs",
    }
)
# A device name is the `client` half of `tenant/client` and may become a client id.
DEVICE_NAME_VALIDATOR = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$",
    "Use 1-64 letters, digits, '_', '.', ':' or '-', starting with a letter or digit.",
)


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


class Membership(models.Model):
    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    class Role(models.TextChoices):
        OWNER = "owner"
        ADMIN = "admin"
        VIEWER = "viewer"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.VIEWER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="membership_unique_user")
        ]

    @property
    def can_write(self) -> bool:
        return self.role in (self.Role.OWNER, self.Role.ADMIN)


class Invitation(models.Model):
    """An invitation to join a tenant with a role, accepted by a link carrying `token` (only
    its digest is kept, like API tokens)."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(
        max_length=8, choices=Membership.Role.choices, default=Membership.Role.VIEWER
    )
    digest = models.CharField(max_length=64, unique=True)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    @property
    def is_open(self) -> bool:
        return self.accepted_at is None and self.expires_at > timezone.now()


class ApiToken(models.Model):
    """A bearer token for the REST API, acting as `user` within `tenant`. Only its digest is kept."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=64, default="default")
    digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # The login token (the one `POST /auth/token` and the API signup hand out) is kept sealed
    # (`common.security.sealed`) as well as digested, so the next login can hand the same token out again
    # instead of piling up a new one each time. Empty for named tokens, shown once only.
    sealed = models.TextField(blank=True, default="")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "tenant"],
                condition=~models.Q(sealed=""),
                name="one_login_token_per_member",
            )
        ]

    @property
    def is_login_token(self) -> bool:
        return bool(self.sealed)


class AccountTrust(models.Model):
    """What the platform knows of a person's account beyond Django's user: the email address it
    proved it holds (a signed link mailed there, a password reset or an accepted invitation), and
    digests of the addresses it last logged in from (the login throttle trusts those more).

    An account that has not proved its address keeps what it made itself (its own signup tenant)
    but is handed nothing else: no tenant by an operator, no operator rights (`tenants.accounts.trust`).
    """

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        on_delete=models.CASCADE,
        primary_key=True,
        related_name="trust",
    )
    verified_email = models.EmailField(blank=True, default="")
    verified_at = models.DateTimeField(null=True, blank=True)
    # HMACs (keyed by SECRET_KEY) of the last few client addresses of successful logins: never
    # the addresses themselves.
    login_addresses = ArrayField(models.CharField(max_length=64), default=list, blank=True)


class Device(models.Model):
    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    class ClientIdPolicy(models.TextChoices):
        EXACT = "exact"
        ANY = "any"
        PATTERN = "pattern"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="devices")
    name = models.CharField(max_length=64, validators=[DEVICE_NAME_VALIDATOR])
    enabled = models.BooleanField(default=True)
    client_id_policy = models.CharField(
        max_length=8, choices=ClientIdPolicy.choices, default=ClientIdPolicy.EXACT
    )
    client_id_pattern = models.CharField(max_length=255, blank=True)
    attributes = models.JSONField(default=dict, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Written by the broker (data_plane.tenancy.presence) when the device's last connection ended.
    last_disconnect_reason = models.CharField(max_length=64, blank=True, default="")
    last_disconnected_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="device_unique_name")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.username

    @property
    def username(self) -> str:
        return f"{self.tenant.slug}/{self.name}"


class DeviceConnection(models.Model):
    """A live MQTT connection of a device, as the broker that holds it reports it
    (`data_plane.tenancy.presence`). A row whose `heartbeat_at` is older than 90 s belongs to a
    broker that is gone and is ignored."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="connections")
    client_id = models.CharField(max_length=255)
    connection_key = models.CharField(max_length=32, unique=True)
    broker = models.CharField(max_length=128)
    address = models.CharField(max_length=64)
    protocol_version = models.PositiveSmallIntegerField()
    transport = models.CharField(max_length=16, default="tcp")
    connected_at = models.DateTimeField()
    subscriptions = models.JSONField(default=list)
    heartbeat_at = models.DateTimeField()
    # The session behind the connection, for the inspection (GET /api/v1/sessions): what the
    # client asked for at CONNECT, and a sample of what its session holds, written every few
    # seconds where it changed (data_plane.tenancy.session_figures).
    clean_start = models.BooleanField(default=True, db_default=True)
    expiry_interval = models.BigIntegerField(
        default=0, db_default=0, help_text="seconds; 0xFFFFFFFF never"
    )
    queued = models.IntegerField(default=0, db_default=0, help_text="deliveries waiting")
    inflight = models.IntegerField(default=0, db_default=0, help_text="sent, not acknowledged")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "client_id"], name="deviceconnection_unique_client"
            )
        ]
        ordering = ["connected_at"]

    @property
    def protocol(self) -> str:
        return {3: "MQTT 3.1", 4: "MQTT 3.1.1", 5: "MQTT 5.0"}.get(
            self.protocol_version, str(self.protocol_version)
        )


class Credential(models.Model):
    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="credentials")
    secret_hash = models.CharField(max_length=128)
    # SCRAM-SHA-256 verifier of the same secret (common.security.secrets.scram_verifier): MQTT 5.0
    # enhanced authentication; empty for credentials issued before it existed.
    scram_verifier = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # When a rotation replaced this secret: from then it only lives out its grace period.
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["device"], name="credential_active_idx", condition=Q(revoked_at=None)
            )
        ]

    @property
    def is_active(self) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()

    @property
    def state(self) -> str:
        """`active`, `retiring` (replaced, still accepted until `expires_at`), `expired` or
        `revoked`."""
        if self.expires_at is not None and self.expires_at <= (self.revoked_at or timezone.now()):
            return "expired"  # also once the expiry sweep (credentials_expire) has revoked it
        if self.revoked_at is not None:
            return "revoked"
        return "retiring" if self.retired_at is not None else "active"


class AclRule(models.Model):
    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    class Action(models.TextChoices):
        PUBLISH = "publish"
        SUBSCRIBE = "subscribe"
        BOTH = "both"

    class Permission(models.TextChoices):
        ALLOW = "allow"
        DENY = "deny"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="acl_rules")
    device = models.ForeignKey(
        Device, on_delete=models.CASCADE, null=True, blank=True, related_name="acl_rules"
    )
    action = models.CharField(max_length=9, choices=Action.choices)
    permission = models.CharField(max_length=5, choices=Permission.choices)
    topic = models.CharField(max_length=512, help_text="filter; ${tenant} and ${client} expand")
    position = models.PositiveIntegerField(default=0, help_text="rules apply in ascending order")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["position", "id"]


class ActionsField(models.JSONField):
    """A rule's actions: webhook secrets sealed in the database and open in Python, on every
    path the ORM takes (saves, bulk writes, reads, `values()`), so no view or service can store
    one in the clear by forgetting to (`common.security.sealed`)."""

    def get_prep_value(self, value):
        return super().get_prep_value(seal_actions(value))

    def from_db_value(self, value, expression, connection):
        return open_actions(super().from_db_value(value, expression, connection))


class Rule(models.Model):
    """A tenant's data rule: SQL over its message stream plus actions (run by the Spark jobs)."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="rules")
    name = models.CharField(max_length=64, validators=[DEVICE_NAME_VALIDATOR])
    sql = models.TextField()
    actions = ActionsField(default=list, blank=True)
    enabled = models.BooleanField(default=True)
    # Set by the live rules job when the rule kept going over its budget (common/rules/budget.py):
    # it stops running until the tenant saves or enables it again (services.rule_update).
    paused_at = models.DateTimeField(null=True, blank=True)
    paused_reason = models.TextField(blank=True, default="", db_default="")
    # One more each time the SQL or the actions change (services.rule_update): an action done for
    # a message is remembered per rule version (RuleActionLedger), so a `new-only` run re-fires
    # what a changed rule would now do differently, and nothing an unchanged one did already.
    version = models.PositiveIntegerField(default=1, db_default=1)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="rule_unique_name")]
        ordering = ["name"]


class RuleMetrics(models.Model):
    """A rule's running counters, written by the rule jobs (live and backfill) with psycopg.

    Counted as EMQX counts them: `matched` rows the FROM took, `passed` rows whose WHERE held (they
    produced outputs), `failed` rows whose evaluation raised (bad JSON payload, a function error);
    each action run ends in `actions_ok` or `actions_failed` (after its retries)."""

    rule = models.OneToOneField(
        Rule, on_delete=models.CASCADE, primary_key=True, related_name="metrics"
    )
    matched = models.BigIntegerField(default=0)
    passed = models.BigIntegerField(default=0)
    failed = models.BigIntegerField(default=0)
    actions_ok = models.BigIntegerField(default=0)
    actions_failed = models.BigIntegerField(default=0)
    last_error = models.TextField(blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    lag_ms = models.BigIntegerField(null=True, blank=True, help_text="publish → action, last batch")
    # The live job's recent latency (`spark.rules.live.RecentLatency`): publish → action done,
    # over the actions of the last five minutes.
    latency_p50_ms = models.BigIntegerField(null=True, blank=True)
    latency_p99_ms = models.BigIntegerField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)


class RuleDeadLetter(models.Model):
    """An action output that failed after every retry, kept for the tenant to see and replay."""

    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="dead_letters")
    action = models.JSONField(help_text="the action as configured")
    # NUL and lone surrogates are escaped there as `\u0000` text: jsonb cannot hold them.
    output = models.JSONField(help_text="the rule output the action was given")
    # The exact JSON the action sent (ASCII: every such character a \u escape), so a replay
    # signs and sends the same bytes; empty for letters written before it was kept.
    body = models.TextField(blank=True, default="", db_default="")
    error = models.TextField()
    attempts = models.IntegerField(default=1)
    # The action's key in RuleActionLedger (`spark.rules.ledger.ActionKey.encode`): a replay
    # skips a letter whose action a run did since, and records the ones it delivers. Empty for
    # letters written before it was kept, and for budget letters (no action ran).
    ledger_key = models.TextField(blank=True, default="", db_default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["rule", "-created_at"], name="rule_dead_letter_idx")]


class RuleActionRetry(models.Model):
    """A rule action's output waiting for another attempt (a webhook that failed in a way worth
    retrying, a republish the broker did not take) or for room in its tenant's action lane: the
    live rules job's durable queue (spark/rules/retry_store.py), so a restart loses none. The
    action is kept without its secret (the job takes it from the rule when it runs it again)."""

    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="+")
    action = models.JSONField(help_text="the action as configured, without its secret")
    body = models.TextField(help_text="the output as the exact JSON sent")
    ts_ms = models.BigIntegerField(help_text="the message's time, for the lag")
    attempts = models.IntegerField(default=0, help_text="attempts made so far")
    last_error = models.TextField(blank=True, default="")
    next_attempt_at = models.DateTimeField()
    ledger_key = models.TextField(blank=True, default="", db_default="")  # as RuleDeadLetter's
    # the message's topic and publisher: the journey's row of the action's outcome names them
    topic = models.TextField(blank=True, default="", db_default="")
    client_id = models.TextField(blank=True, default="", db_default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["next_attempt_at"], name="rule_retry_due_idx")]


class RuleFeedPosition(models.Model):
    """How far the live rules job has read its live feed (a Redis stream of the rows the rules
    read, `data_plane.storage.live_feed`): `acted`, every entry up to it had its actions done
    or kept in the durable retry queue; `evaluated`, every entry up to it was counted (rule
    counters, usage). A restart reads again from `acted`: the entries up to `evaluated` only for
    the actions the ledger does not hold. Written by the rules job with psycopg
    (`spark/rules/feed.py`)."""

    stream = models.CharField(max_length=200, primary_key=True)
    acted = models.CharField(max_length=64, default="0-0")
    evaluated = models.CharField(max_length=64, default="0-0")
    updated_at = models.DateTimeField(default=timezone.now)


class RuleActionLedger(models.Model):
    """Actions done, one row per (rule, rule version, message, output, action): written by the
    live rules job for each action that succeeded, by runs over history (claimed before the
    action runs, confirmed once it ran, released if it fails or the run ends without confirming
    it), and by dead-letter replays; read by `new-only` runs, which never run an action this
    table holds. `message_id` is the archive's stable id
    (`common.archive.schema`, "Message ids"); `output` the output's position among the message's
    outputs (FOREACH), `action` the action's position among the rule's. Written by the jobs with
    psycopg (`spark/rules/ledger.py`)."""

    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="+")
    version = models.PositiveIntegerField()
    message_id = models.TextField()
    output = models.IntegerField(default=0)
    action = models.IntegerField(default=0)
    message_ts = models.DateTimeField(help_text="the message's time (old entries are pruned)")
    source = models.CharField(max_length=16, help_text="live, run or replay")
    done_at = models.DateTimeField(default=timezone.now)
    # A `new-only` run claims an action (fired false, `run` its owner) before firing it and
    # confirms it (fired true) once it ran. A claim left unconfirmed by a run that ended (failed,
    # cancelled, or its worker lost: `tenants.rules.runs.services.runs_reclaim`) is deleted, so a
    # later `new-only` run fires that action: at least once, never zero times.
    fired = models.BooleanField(
        default=True, db_default=True, help_text="false: claimed by `run`, not confirmed yet"
    )
    run = models.ForeignKey(
        "RuleRun",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,  # the claims' own index below: fired rows never need it
        help_text="the run that claimed it (runs over history only)",
    )

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "version", "message_id", "output", "action"],
                name="rule_action_ledger_key",
            )
        ]
        indexes = [
            models.Index(fields=["message_ts"], name="rule_action_ledger_ts_idx"),
            models.Index(
                fields=["run", "done_at"],
                condition=models.Q(fired=False),
                name="rule_action_ledger_claims_idx",
            ),
        ]


class RuleRun(models.Model):
    """A tenant's run of one rule over its archived history (`POST /api/v1/rules/{name}/runs`,
    mode `run`): queued, then run on Spark by a Celery task (`tenants.rules.runs.execute`), the
    same backfill as `manage.py run_rules`. Its figures grow as the run goes; a cancel asked
    for (`cancel_requested_at`) stops it between chunks, and cancels the Spark jobs under way.
    The public id is a random UUID: run ids say nothing about other tenants' runs."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"
        CANCELLED = "cancelled"

    class Actions(models.TextChoices):
        ALL = "all"
        NEW_ONLY = "new-only"
        NONE = "none"

    ACTIVE = (State.QUEUED, State.RUNNING)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="rule_runs")
    rule = models.ForeignKey(Rule, on_delete=models.CASCADE, related_name="runs")
    rule_version = models.PositiveIntegerField()
    start = models.DateTimeField(help_text="first instant of the range (inclusive)")
    end = models.DateTimeField(help_text="end of the range (exclusive)")
    actions = models.CharField(max_length=16, choices=Actions.choices)
    # One action of the rule only (from 1, as users count): a re-send from history to one sink.
    only_action = models.PositiveSmallIntegerField(
        null=True, blank=True, help_text="the rule's action that fires (from 1); null: all"
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    requested_by = models.EmailField(blank=True, default="")
    read = models.BigIntegerField(default=0, help_text="archived messages of the range read")
    matched = models.BigIntegerField(default=0, help_text="messages the rule matched (passed)")
    considered = models.BigIntegerField(default=0, help_text="messages its FROM took")
    failed = models.BigIntegerField(default=0, help_text="messages whose evaluation failed")
    actions_fired = models.BigIntegerField(default=0, help_text="actions run (metered)")
    actions_failed = models.BigIntegerField(default=0, help_text="of those, failed")
    actions_skipped = models.BigIntegerField(
        default=0, help_text="actions not run: `none`, or done already (`new-only`)"
    )
    chunks_done = models.IntegerField(default=0)
    chunks = models.IntegerField(default=0)
    error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    # Written every few seconds while it runs: a run whose worker died (no heartbeat for
    # STALE_AFTER) is failed by the next request to start one, instead of blocking its rule.
    heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["rule", "-created_at"], name="rule_run_rule_idx")]


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


class UsageLogImport(models.Model):
    """A usage-log segment of another writer (the rules job) already rolled up into `Usage`, so
    each is added once."""

    key = models.CharField(max_length=512, unique=True)
    imported_at = models.DateTimeField(default=timezone.now)


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


# -- Broker state (written by the data plane, schema owned here) --------------------------------


class MqttSession(models.Model):
    """A persistent MQTT session (3.1.1 clean session 0, 5.0 session expiry > 0)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="mqtt_sessions")
    client_id = models.CharField(max_length=256)
    expiry_interval = models.BigIntegerField(default=0, help_text="seconds; 0xFFFFFFFF never")
    # Null while a client is connected; set when it disconnects (disconnected_at + expiry).
    expires_at = models.DateTimeField(null=True, blank=True)
    subscriptions = models.JSONField(default=list, blank=True)
    will = models.JSONField(null=True, blank=True)
    next_packet_id = models.IntegerField(default=1)
    # QoS 2 packet ids received from this client and not yet released (PUBREL): a resent PUBLISH
    # with one of them is not delivered again, even after a broker restart.
    inbound_qos2 = ArrayField(models.IntegerField(), default=list, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "client_id"], name="mqtt_session_unique")
        ]
        indexes = [models.Index(fields=["expires_at"], name="mqtt_session_expiry_idx")]


class MqttQueuedMessage(models.Model):
    """One message waiting for (or in flight to) a persistent session, in `seq` order."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    client_id = models.CharField(max_length=256)
    seq = models.BigIntegerField()
    topic = models.TextField()
    payload = models.BinaryField(null=True, blank=True)
    object_key = models.TextField(blank=True, help_text="set when the payload is in the store")
    qos = models.SmallIntegerField()
    retain = models.BooleanField(default=False)
    properties = models.JSONField(default=dict, blank=True)
    packet_id = models.IntegerField(null=True, blank=True)
    state = models.SmallIntegerField(default=0, help_text="0 queued, 1 sent, 2 pubrec received")
    expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "client_id", "seq"], name="mqtt_queue_unique_seq"
            )
        ]
        indexes = [
            # Orphan collection asks which payload objects rows still refer to.
            models.Index(
                fields=["object_key"],
                name="mqtt_queue_object_key",
                condition=~models.Q(object_key=""),
            )
        ]


class SharedGroupQueue(models.Model):
    """A durable shared subscription group (`$share/{name}/{topic_filter}`): its messages wait in
    `MqttQueuedMessage` under `holder_id` while it has no member (data_plane.broker.groups)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="shared_groups")
    name = models.CharField(max_length=256)
    topic_filter = models.TextField()
    # The client id its queue rows are kept under: `$group:` and a hash of (name, filter), so
    # that any group fits the column and no client can take it (CONNECT refuses the prefix).
    holder_id = models.CharField(max_length=256)
    members = models.IntegerField(default=0, help_text="members as its broker last counted them")
    created_at = models.DateTimeField(default=timezone.now)
    # Null while it has members; else when the group and its messages go (group_retention).
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "holder_id"], name="shared_group_unique")
        ]


class RetainedMessage(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    topic = models.TextField()
    payload = models.BinaryField(null=True, blank=True)
    object_key = models.TextField(blank=True)
    qos = models.SmallIntegerField(default=0)
    properties = models.JSONField(default=dict, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "topic"], name="retained_unique_topic")
        ]


class DelayedMessage(models.Model):
    """`$delayed/{seconds}/{topic}` publishes, delivered at `deliver_at` (survives restarts)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    topic = models.TextField()
    payload = models.BinaryField(null=True, blank=True)
    object_key = models.TextField(blank=True)
    qos = models.SmallIntegerField(default=0)
    retain = models.BooleanField(default=False)
    properties = models.JSONField(default=dict, blank=True)
    publisher = models.CharField(max_length=256, blank=True)
    deliver_at = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["deliver_at"], name="delayed_due_idx")]


# -- device identity beyond secrets (issue 20): X.509 and JWT -------------------------------


class CaCertificate(models.Model):
    """A tenant's certificate authority (AWS IoT's "register CA"): device certificates it signed
    name their device in the subject CN, and the CA names the tenant. A CA belongs to one tenant
    (its fingerprint is unique among the live ones)."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="ca_certificates")
    name = models.CharField(max_length=64, validators=[DEVICE_NAME_VALIDATOR])
    pem = models.TextField()
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the DER, hex")
    subject = models.CharField(max_length=512)
    not_after = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Just-in-time registration (AWS's auto-registration of a CA): a certificate it signed whose
    # CN names no device yet makes that device on its first connection.
    auto_registration = models.BooleanField(default=False, db_default=False)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="ca_unique_name"),
            models.UniqueConstraint(
                fields=["fingerprint"], condition=Q(revoked_at=None), name="ca_live_fingerprint"
            ),
        ]


class DeviceCertificate(models.Model):
    """One device's own certificate, registered by its SHA-256 fingerprint (self-signed or from a
    CA the platform does not know). It proves the key, not the tenant: a client presenting it must
    name its device in the user name (`tenant/device`), so another tenant registering the same
    certificate for itself gains nothing (unique per tenant, not across tenants)."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="device_certificates")
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="certificates")
    pem = models.TextField()
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the DER, hex")
    subject = models.CharField(max_length=512)
    not_after = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "fingerprint"],
                condition=Q(revoked_at=None),
                name="device_cert_live_fingerprint",
            ),
        ]


class JwtKey(models.Model):
    """A tenant's public key for device JWTs (the password of `tenant/device`)."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    class Algorithm(models.TextChoices):
        RS256 = "RS256"
        ES256 = "ES256"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="jwt_keys")
    kid = models.CharField(max_length=64, validators=[DEVICE_NAME_VALIDATOR])
    algorithm = models.CharField(max_length=5, choices=Algorithm.choices)
    public_key = models.TextField(help_text="PEM (SubjectPublicKeyInfo)")
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["kid"]
        constraints = [models.UniqueConstraint(fields=["tenant", "kid"], name="jwt_key_kid")]


# -- accountability (issue 20) -------------------------------------------------------------


class AuditEntry(models.Model):
    """One control-plane change: who, what, when, from where, through which door. The tenant is
    kept by id and slug, not as a foreign key: the entry outlives what it records, the tenant's
    own deletion included."""

    tenant_id = models.BigIntegerField(null=True, blank=True, help_text="None: platform-wide")
    tenant_slug = models.CharField(max_length=32, blank=True)
    actor = models.CharField(max_length=254, help_text="the user's email, or the command")
    via = models.CharField(max_length=16, help_text="api, portal, admin, command, system")
    action = models.CharField(max_length=64, help_text="e.g. device.created")
    target = models.CharField(max_length=256, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    address = models.GenericIPAddressField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant_id", "-created_at"], name="audit_tenant_time")]


class MqttStreamMark(models.Model):
    """The last entry of a broker node's forward stream (data_plane/cluster/forward.py) whose
    deliveries to persistent sessions are committed, written by the node in the same transaction
    as them: a survivor draining the stream of a node that died skips the entries it covers, so
    a message the dead node committed but had not acknowledged on the bus is not queued twice
    (data_plane/cluster/inherit.py). One row per node, deleted when the node leaves or is
    replaced."""

    node = models.CharField(max_length=200, primary_key=True)
    entry = models.CharField(max_length=48, help_text="a Redis stream entry id, ms-seq")
    updated_at = models.DateTimeField(default=timezone.now)


class HistoryPolicy(models.Model):
    """A tenant's choice to keep the messages on `topic_filter` (MQTT wildcards) for `days` in
    the archive. The broker archives a topic only if a policy or an enabled rule needs it
    (`common.archive.history_policy`); retention deletes the tenant's history hours older than its
    longest policy (`tenants.history.retention`)."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="history_policies")
    topic_filter = models.CharField(max_length=256)
    days = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "topic_filter"], name="history_policy_unique_filter"
            )
        ]
        ordering = ["topic_filter", "id"]

    def __str__(self) -> str:
        return f"{self.topic_filter} ({self.days} d)"


class Shadow(models.Model):
    """A device's shadow, as AWS IoT keeps it (`common.shadow.document`): `name` "" is the
    classic shadow, any other a named one. Written by the broker's shadow service
    (`data_plane.shadows.store`, with psycopg) and by the REST API (`tenants.shadows.services`),
    each holding the row's lock while it merges. A deleted shadow keeps its row (`present`
    false) and its `version`, so one created again under that name goes on from it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="shadows")
    name = models.CharField(max_length=64, blank=True, default="")
    version = models.BigIntegerField(default=0)
    present = models.BooleanField(default=False)
    state = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["device", "name"], name="shadow_unique_name")
        ]
        ordering = ["name"]


class ShadowVersion(models.Model):
    """One accepted change of a shadow, kept for the plan's `shadow_history_days`: the state
    after it (empty for a delete), the request's state, and who made it. A change made through
    the REST API carries the replies devices are sent (`replies`) until a broker has published
    them (`published_at`): the control plane reaches the broker through the database
    (`data_plane.shadows.announcements`)."""

    class Operation(models.TextChoices):
        UPDATE = "update"
        DELETE = "delete"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    shadow = models.ForeignKey(Shadow, on_delete=models.CASCADE, related_name="versions")
    version = models.BigIntegerField()
    operation = models.CharField(max_length=8, choices=Operation.choices)
    state = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    request = models.JSONField(null=True, blank=True, help_text="the update's state node")
    client_token = models.CharField(max_length=64, blank=True, default="")
    actor = models.CharField(max_length=255, blank=True, default="", help_text="client id or user")
    via = models.CharField(max_length=8, default="mqtt", help_text="mqtt | api")
    replies = models.JSONField(null=True, blank=True, help_text="[[topic, body], ...] to publish")
    published_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["shadow", "-id"], name="shadow_version_recent"),
            models.Index(fields=["tenant", "created_at"], name="shadow_version_age"),
        ]


class DeviceGroup(models.Model):
    """A static group of devices by name (AWS's static thing groups): jobs target groups."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="device_groups")
    name = models.CharField(max_length=128, validators=[DEVICE_NAME_VALIDATOR])
    devices = models.ManyToManyField(Device, related_name="groups", blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="device_group_unique_name")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Job(models.Model):
    """A job (AWS IoT Jobs): a document for the devices it targets, each of which gets an
    execution (`JobExecution`), served on `$aws/things/{device}/jobs/…` (`data_plane.jobs`)."""

    class Status(models.TextChoices):
        IN_PROGRESS = "IN_PROGRESS"
        CANCELED = "CANCELED"
        COMPLETED = "COMPLETED"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="jobs")
    job_id = models.CharField(max_length=64)
    description = models.CharField(max_length=2028, blank=True, default="")
    document = models.JSONField(default=dict, blank=True)
    targets = models.JSONField(default=dict, blank=True, help_text="{devices: [], groups: []}")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.IN_PROGRESS)
    timeout_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="an IN_PROGRESS execution times out after this"
    )
    # Rollout (AWS's maximumPerMinute): devices not yet given an execution wait in `unreleased`
    # (device ids, in order) and Celery beat releases up to this many each minute.
    rollout_per_minute = models.PositiveIntegerField(null=True, blank=True)
    unreleased = models.JSONField(default=list, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)
    # Abort criteria (AWS's abortConfig): [{failure_type, threshold_percentage,
    # min_executed_things}]; Celery beat cancels the job when one is met.
    abort_criteria = models.JSONField(default=list, blank=True)
    # Retries (AWS's jobExecutionsRetryConfig): [{failure_type FAILED | TIMED_OUT | ALL,
    # number_of_retries}]; a FAILED or TIMED_OUT execution within them is queued again.
    retry_criteria = models.JSONField(default=list, db_default=[], blank=True)
    # The artifacts its document names (`${aws:iot:s3-presigned-url:artifact/NAME}`), checked
    # when it was created: an artifact a running job names cannot be deleted.
    artifacts = models.JSONField(default=list, db_default=[], blank=True)
    reason = models.CharField(max_length=255, blank=True, default="", help_text="why it ended")
    created_by = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "job_id"], name="job_unique_id")]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.job_id


class JobExecution(models.Model):
    """One device's execution of a job, with AWS's states (`common.jobs.executions`). Written
    by the broker's jobs service (psycopg, the row locked) and by the control plane (a job's
    cancel, the timeouts)."""

    class Status(models.TextChoices):
        QUEUED = "QUEUED"
        IN_PROGRESS = "IN_PROGRESS"
        SUCCEEDED = "SUCCEEDED"
        FAILED = "FAILED"
        TIMED_OUT = "TIMED_OUT"
        REJECTED = "REJECTED"
        REMOVED = "REMOVED"
        CANCELED = "CANCELED"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="executions")
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="job_executions")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    status_details = models.JSONField(default=dict, blank=True)
    version_number = models.BigIntegerField(default=1)
    execution_number = models.BigIntegerField(default=1)
    queued_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    last_updated_at = models.DateTimeField(default=timezone.now)
    timeout_at = models.DateTimeField(
        null=True, blank=True, help_text="an IN_PROGRESS execution becomes TIMED_OUT then"
    )
    # Retries made so far, by the failure that called for them (`execution_number` - 1 in all).
    failed_retries = models.PositiveIntegerField(default=0, db_default=0)
    timed_out_retries = models.PositiveIntegerField(default=0, db_default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "device"], name="job_execution_unique")
        ]
        indexes = [
            models.Index(fields=["device", "status"], name="job_execution_device"),
            models.Index(
                fields=["timeout_at"],
                name="job_execution_timeout",
                condition=models.Q(status="IN_PROGRESS"),
            ),
        ]
        ordering = ["id"]


class JobAnnouncement(models.Model):
    """Notifications of a jobs change the control plane made, for a broker to publish
    (`common.jobs.announcements`)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    replies = models.JSONField(default=list, blank=True, help_text="[[topic, body], ...]")
    published_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["created_at"], name="job_announcement_age")]


class JobArtifact(models.Model):
    """A file a tenant uploaded for its jobs (firmware), kept in the object store under its
    prefix (`common.jobs.artifacts.object_key`) and handed to devices as short-lived URLs."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="job_artifacts")
    name = models.CharField(max_length=128)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    content_type = models.CharField(max_length=255, blank=True, default="")
    created_by = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="job_artifact_unique_name")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class JobMeter(models.Model):
    """Job executions queued (new ones and retries), counted in the transaction that queued
    them, by the control plane or a broker; `tenants.jobs.metering` writes them to the usage
    log once (`batch`: the rows written together, `logged_at`: when written)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    executions = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now, db_default=Now())
    batch = models.BigIntegerField(null=True, blank=True)
    logged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["id"], name="job_meter_unlogged", condition=models.Q(logged_at=None)
            )
        ]


# -- fleet provisioning by claim (issue 32): a tenant's provisioning templates, the CA the
# platform keeps for the tenant, and the certificates that CA issued (claims, and devices' own).


class FleetAuthority(models.Model):
    """The CA the platform keeps for one tenant's fleet provisioning. Its certificate is one of
    the tenant's registered CAs (so the TLS listeners let its certificates through); its key is
    sealed at rest (`common.security.sealed`) and used by the broker to sign devices' certificates."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="fleet_authority")
    ca = models.OneToOneField(CaCertificate, on_delete=models.CASCADE, related_name="+")
    key = models.TextField(help_text="PEM private key, sealed")
    created_at = models.DateTimeField(default=timezone.now)


class ProvisioningTemplate(models.Model):
    """AWS IoT's provisioning template: what a device that provisions with it becomes. The device
    name comes from the request's parameters (`sensor-{SerialNumber}`); the ACL rules are given to
    the new device (`${client}` is its name), and it joins the template's groups (AWS's thing
    groups of the template's `AWS::IoT::Thing` resource), all in RegisterThing's transaction."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="provisioning_templates"
    )
    name = models.CharField(max_length=64, validators=[DEVICE_NAME_VALIDATOR])
    device_name_template = models.CharField(max_length=128)
    acl_rules = models.JSONField(default=list, blank=True)  # [{action, permission, topic}]
    attributes = models.JSONField(default=dict, blank=True)  # given to the new device
    # The new device's groups: the tenant's own (checked by `tenants.fleet.services`); a group deleted
    # later simply drops out, as its devices stay when a group goes.
    groups = models.ManyToManyField(DeviceGroup, blank=True, related_name="provisioning_templates")
    enabled = models.BooleanField(default=True)
    pre_provisioning_hook_url = models.URLField(max_length=512, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="provisioning_template_name")
        ]


class FleetCertificate(models.Model):
    """A certificate the tenant's fleet CA issued, known by its SHA-256 (AWS's certificateId):
    a claim of a template (it may only provision), or a device's own, created over MQTT and
    bound to its device when the device registered (`device` set)."""

    class Kind(models.TextChoices):
        CLAIM = "claim"
        DEVICE = "device"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=6, choices=Kind.choices)
    certificate_id = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the DER")
    # A claim's template, or the template of the claim that created a device's certificate.
    # SET_NULL: deleting a template (which deletes its claims) leaves its devices connected.
    template = models.ForeignKey(
        ProvisioningTemplate,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="certificates",
    )
    device = models.ForeignKey(
        Device, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    pem = models.TextField()
    # A device certificate's one-time ownership token (RegisterThing), as a SHA-256 hex digest.
    ownership_token = models.CharField(max_length=64, blank=True, default="")
    token_expires_at = models.DateTimeField(null=True, blank=True)
    not_after = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["template"], name="fleet_claim_live_idx", condition=Q(revoked_at=None)
            )
        ]

"""The alarm tables (issue 46), registered under the `tenants` app (`tenants.models` imports
this module; their services and selectors are `tenants.alarms`): definitions that the tenant
writes, and the state per (alarm, key) and its transitions, which the live rules job writes
(`common.alarms.machine` decides them) and a person's acknowledgement adds to.

The choices come from the pure core (`common.alarms`), so the tables, the API and the jobs name
states, events, severities and causes alike.
"""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from common.alarms.definition import NO_DATA_KEYS, NOTIFY_KINDS, SEVERITIES
from common.alarms.machine import CONDITION, EVENTS, NO_DATA, NORMAL, STATES

ALARM_NAME_VALIDATOR = RegexValidator(
    r"^[A-Za-z0-9_-]{1,64}$", "Use 1-64 letters, digits, '_' or '-'."
)
MIN_RENOTIFY_SECONDS = 60  # re-notifying more often than a minute is a flood, not a reminder
MAX_SEEN_DAYS = 30


def _choices(values: tuple[str, ...]) -> list[tuple[str, str]]:
    return [(value, value) for value in values]


CAUSES = _choices((CONDITION, NO_DATA))


class AlarmDefinition(models.Model):
    """What a tenant watches: a source, a key per message, when a key raises and clears, and
    whom to tell. Off until enabled: the issue wants an alarm tried on history first."""

    tenant = models.ForeignKey(
        "tenants.Tenant", on_delete=models.CASCADE, related_name="alarm_definitions"
    )
    name = models.CharField(max_length=64, validators=[ALARM_NAME_VALIDATOR])
    description = models.TextField(blank=True, default="")
    source = models.CharField(
        max_length=1024, help_text="a topic filter, or a $events/… lifecycle source"
    )
    key = models.TextField(default="clientid", help_text="an expression: what a state is per")
    raise_condition = models.TextField(blank=True, default="")
    raise_for_seconds = models.PositiveIntegerField(default=0)
    clear_condition = models.TextField(
        blank=True, default="", help_text="empty: not the raise condition"
    )
    clear_for_seconds = models.PositiveIntegerField(
        null=True, blank=True, help_text="null: the raise condition's duration"
    )
    no_data_seconds = models.PositiveIntegerField(null=True, blank=True)
    no_data_keys = models.CharField(max_length=8, choices=_choices(NO_DATA_KEYS), default="seen")
    seen_days = models.PositiveSmallIntegerField(
        default=7, validators=[MinValueValidator(1), MaxValueValidator(MAX_SEEN_DAYS)]
    )
    value = models.TextField(blank=True, default="", help_text="an expression shown with a state")
    severity = models.CharField(max_length=8, choices=_choices(SEVERITIES), default="major")
    notifications = models.JSONField(default=list, blank=True)
    renotify_seconds = models.PositiveIntegerField(
        null=True, blank=True, validators=[MinValueValidator(MIN_RENOTIFY_SECONDS)]
    )
    enabled = models.BooleanField(default=False)
    # +1 on each change of what is evaluated, so the jobs know their state came from another one.
    version = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="alarm_definition_unique_name")
        ]

    def __str__(self) -> str:
        return self.name


class AlarmState(models.Model):
    """One key's state under one alarm, as the live job last wrote it (or an acknowledgement)."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    definition = models.ForeignKey(AlarmDefinition, on_delete=models.CASCADE, related_name="states")
    key = models.CharField(max_length=255)
    status = models.CharField(max_length=12, choices=_choices(STATES), default=NORMAL)
    since = models.DateTimeField(default=timezone.now, help_text="when the status began")
    value = models.JSONField(null=True, blank=True)
    cause = models.CharField(max_length=12, choices=CAUSES, null=True, blank=True)
    raised_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.CharField(max_length=254, null=True, blank=True)
    cleared_at = models.DateTimeField(null=True, blank=True)
    # The live job's whole `common.alarms.machine.KeyState` (its timers' clocks: pending since,
    # clearing since, last seen): what it loads at a restart. Not shown.
    machine = models.JSONField(null=True, blank=True, editable=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["definition", "key"], name="alarm_state_unique_key")
        ]
        indexes = [models.Index(fields=["tenant", "status"], name="alarm_state_status_idx")]

    def __str__(self) -> str:
        return f"{self.definition_id}/{self.key}: {self.status}"


class AlarmTransition(models.Model):
    """A change of a key's state (or a re-notification), kept as its history."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    definition = models.ForeignKey(
        AlarmDefinition, on_delete=models.CASCADE, related_name="transitions"
    )
    key = models.CharField(max_length=255)
    event = models.CharField(max_length=12, choices=_choices(EVENTS))
    before = models.CharField(max_length=12, choices=_choices(STATES))
    after = models.CharField(max_length=12, choices=_choices(STATES))
    at = models.DateTimeField()
    value = models.JSONField(null=True, blank=True)
    cause = models.CharField(max_length=12, choices=CAUSES, null=True, blank=True)
    # The archive's id of the message that made it (a path and a row: long); none for a timer's.
    message_id = models.TextField(null=True, blank=True)
    by = models.CharField(max_length=254, null=True, blank=True, help_text="who acknowledged")
    note = models.TextField(blank=True, default="")

    class Meta:
        indexes = [
            models.Index(
                fields=["tenant", "definition", "key", "at"], name="alarm_transition_key_idx"
            )
        ]

    def __str__(self) -> str:
        return f"{self.definition_id}/{self.key}: {self.event} at {self.at:%Y-%m-%d %H:%M:%S}"


class AlarmNotification(models.Model):
    """One notification of one transition to one of its alarm's targets: the outbox the
    notifications are sent from, at least once. The live job writes a row with the transition
    (one transaction) and sends webhooks and republishes; the control plane writes an
    acknowledgement's and sends the emails (`tenants.alarms.emails`). `index` is the target's
    place in the definition's `notifications` (its secret is read there when it is sent)."""

    class State(models.TextChoices):
        PENDING = "pending"
        SENT = "sent"
        FAILED = "failed"  # gave up after its attempts: `last_error` says why

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    transition = models.ForeignKey(
        AlarmTransition, on_delete=models.CASCADE, related_name="notifications"
    )
    kind = models.CharField(max_length=10, choices=_choices(NOTIFY_KINDS))
    index = models.PositiveSmallIntegerField(help_text="the target's place in the definition")
    target = models.TextField(help_text="the URL, address or topic, as it was when made")
    state = models.CharField(max_length=8, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_at = models.DateTimeField(default=timezone.now, help_text="not tried again before")
    last_error = models.TextField(blank=True, default="")
    sent_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # The live job's sender out sending it now (`spark.rules.presence`), None otherwise: a claim
    # whose sender's process ended is taken again at once, not after its lease.
    claimed_by = models.BigIntegerField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["kind", "next_at"],
                name="alarm_notification_due_idx",
                condition=models.Q(state="pending"),
            ),
            models.Index(
                fields=["claimed_by"],
                name="alarm_notification_claimed_idx",
                condition=models.Q(claimed_by__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.target}: {self.state}"

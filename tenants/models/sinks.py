"""The sinks' tables (issue 47), registered under the `tenants` app (`tenants.models` imports
this module; their reads and writes are `tenants.sinks`).

A sink is a rule action of a sink type (`common.contracts.rule_actions.SINK_TYPES`), named by
its rule and its 0-based place in the rule's `actions` (`action_index`). The rules job writes both
tables with plain SQL (`common.contracts.tables.SINK_OUTBOX`, `SINK_STATE`): every column it
leaves out has a database default, so its INSERTs name only what it knows.

- `SinkOutbox`: the outputs waiting for their sink (a durable queue per sink, bounded by the
  quota keys `max_sink_outbox_messages` and `max_sink_outbox_bytes`): delivered in `id` order per
  `key` (the ordering key: Kinesis's partition key, the bridge's topic), retried with backoff
  (`attempts`, `next_attempt_at`, `last_error`), claimed by one sender at a time (`claimed_by`),
  deleted when the sink took them or when they become dead letters.
- `SinkState`: what `GET /api/v1/sinks` says of each sink: `ok`, `retrying` (its oldest output
  failed and waits for another attempt) or `failing` (for longer than the job's limit), the last
  error in words, and counters.
"""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now
from django.utils import timezone

SINK_STATES = ("ok", "retrying", "failing")


class SinkOutbox(models.Model):
    """One rule output waiting for its sink."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    # Indexed by `sink_outbox_order_idx` (rule first): no index of its own.
    rule = models.ForeignKey(
        "tenants.Rule", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    action_index = models.PositiveSmallIntegerField(help_text="0-based place in rule.actions")
    key = models.TextField(
        blank=True, default="", db_default="", help_text="ordering key: delivered in id order"
    )
    body = models.TextField(help_text="the output as the exact JSON the sink is given")
    ts_ms = models.BigIntegerField(help_text="the message's time (ms since the epoch)")
    ledger_key = models.TextField(blank=True, default="", db_default="")  # as RuleDeadLetter's
    # the message's topic and publisher: the journey's row of the sink's outcome names them
    topic = models.TextField(blank=True, default="", db_default="")
    client_id = models.TextField(blank=True, default="", db_default="")
    attempts = models.IntegerField(default=0, db_default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now, db_default=Now())
    last_error = models.TextField(blank=True, default="", db_default="")
    created_at = models.DateTimeField(default=timezone.now, db_default=Now())
    # The sender out sending it now (its `spark.rules.presence` id), None while it waits: a
    # claim whose sender's process ended is taken again at once, not after its lease.
    claimed_by = models.BigIntegerField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["rule", "action_index", "id"], name="sink_outbox_order_idx"),
            # A claim's look for each key's oldest output not due (leased or backing off).
            models.Index(
                fields=["rule", "action_index", "next_attempt_at"], name="sink_outbox_next_idx"
            ),
            models.Index(
                fields=["claimed_by"],
                name="sink_outbox_claimed_idx",
                condition=models.Q(claimed_by__isnull=False),
            ),
            # A claim skips an output while an older one of its key waits (sink_sender._CLAIM).
            models.Index(fields=["rule", "action_index", "key", "id"], name="sink_outbox_key_idx"),
        ]

    def __str__(self) -> str:
        return f"rule {self.rule_id} action {self.action_index + 1}: #{self.id}"


class SinkState(models.Model):
    """A sink's health and counters, as the rules job last wrote them (it upserts on
    (rule, action_index))."""

    class State(models.TextChoices):
        OK = "ok"
        RETRYING = "retrying"
        FAILING = "failing"

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="+")
    # Indexed by `sink_state_unique_action` (rule first): no index of its own.
    rule = models.ForeignKey(
        "tenants.Rule", on_delete=models.CASCADE, related_name="+", db_index=False
    )
    action_index = models.PositiveSmallIntegerField(help_text="0-based place in rule.actions")
    state = models.CharField(
        max_length=8, choices=State.choices, default=State.OK, db_default=State.OK
    )
    last_error = models.TextField(blank=True, default="", db_default="")
    last_error_at = models.DateTimeField(null=True, blank=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)
    delivered = models.BigIntegerField(default=0, db_default=0, help_text="outputs the sink took")
    dead = models.BigIntegerField(default=0, db_default=0, help_text="outputs dead-lettered")
    # Delivered after an attempt that failed: the far end may have taken that attempt too, so
    # it may hold them twice (at least once: the most duplicates there can be).
    resent = models.BigIntegerField(
        default=0, db_default=0, help_text="outputs delivered after a failed attempt"
    )
    lag_ms = models.BigIntegerField(
        null=True,
        blank=True,
        help_text="its last delivery: the oldest output's message to delivered",
    )
    delivered_bytes = models.BigIntegerField(
        default=0, db_default=0, help_text="the delivered outputs' JSON bytes"
    )
    # Throughput: outputs delivered in the clock minute `minute_at` so far, and in the one before
    # it (the sender rolls them over as it settles; the selector ages them by the clock).
    minute_at = models.DateTimeField(null=True, blank=True)
    minute_delivered = models.BigIntegerField(default=0, db_default=0)
    previous_minute_delivered = models.BigIntegerField(default=0, db_default=0)
    # Nothing of its last batch got through (the far end away): none of its outputs is sent
    # before this (its back-off, kept here rather than on each waiting row).
    paused_until = models.DateTimeField(null=True, blank=True)
    # ... and its next attempt takes no output past this id: the same batch again (an HTTP
    # batch keeps its X-Batch-Id, a receiver that took it drops the copy)
    batch_through = models.BigIntegerField(null=True, blank=True)
    # What waits in its outbox, kept by whoever adds or takes rows (the job's appends and sender,
    # a dead-letter replay) in their transactions: the sender finds the sinks with outputs, and
    # the outbox checks its quota, without counting rows (an outage can leave millions).
    waiting = models.BigIntegerField(default=0, db_default=0)
    waiting_bytes = models.BigIntegerField(default=0, db_default=0)
    updated_at = models.DateTimeField(default=timezone.now, db_default=Now())

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["rule", "action_index"], name="sink_state_unique_action"
            )
        ]

    def __str__(self) -> str:
        return f"rule {self.rule_id} action {self.action_index + 1}: {self.state}"

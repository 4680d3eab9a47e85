"""A tenant's data rules (SQL over its message stream plus actions, run by the Spark jobs) and what
the rules jobs keep of them: counters, dead letters, the durable retry queue, the live feed's
position, the actions done (the ledger), and runs over history; reads and writes are
`tenants.rules`. A sink's outbox and state are `tenants.models.sinks`."""

from __future__ import annotations

import uuid

from django.db import models
from django.utils import timezone

from common.security.sealed import open_actions, seal_actions
from tenants.audited import AuditedQuerySet
from tenants.models.names import DEVICE_NAME_VALIDATOR
from tenants.models.tenant import Tenant


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

"""What both modes do with a rule plan's results: actions, counters, dead letters, metering.

The Spark side hands over per-rule counts and the passed rows (rule id, ts, outputs JSON) of the
rules that have actions; this runs the actions on the driver and tallies what happened: usage in
the tally, counters and dead letters in the summary, which the caller hands to its `Books`
(`bookkeeping.py`: written per tenant, kept while the database is away). Returns the summary;
the caller decides how to show it (progress bar, Prometheus, JSON).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from common.archive.schema import device_of_username
from common.webhooks.delivery import output_json
from spark.rules.actions import ActionRunner, Job, Outcome
from spark.rules.bookkeeping import DeadLetter
from spark.rules.firing import Gate
from spark.rules.ledger import ActionKey
from spark.rules.metering import UsageTally
from spark.rules.plan import RuleSpec
from spark.rules.store import RuleDelta

ACTION_CHUNK = 2000  # outputs handed to the action pool at a time (bounds driver memory)


@dataclass
class RuleCount:
    rule_id: int
    tenant: str
    matched: int
    passed: int
    failed: int
    last_error: str | None
    units: int
    # the units by publisher (`username`, None when no device published), for metering per device
    by_user: dict[str | None, int] = field(default_factory=dict)

    def add_user(self, username: str | None, units: int) -> None:
        if units:
            self.by_user[username] = self.by_user.get(username, 0) + units


@dataclass
class BatchSummary:
    matched: int = 0
    passed: int = 0
    failed: int = 0
    actions_ok: int = 0
    actions_failed: int = 0
    actions_skipped: int = 0  # a run's actions not fired (`firing.Gate`: none, new-only)
    dead_letters: int = 0
    deltas: dict[int, RuleDelta] = field(default_factory=dict)
    latencies_ms: list[int] = field(default_factory=list)  # message ts → action done
    letters: list[DeadLetter] = field(default_factory=list, repr=False)  # to be written

    def add(self, other: BatchSummary) -> None:
        for name in (
            "matched",
            "passed",
            "failed",
            "actions_ok",
            "actions_failed",
            "actions_skipped",
            "dead_letters",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for rule_id, delta in other.deltas.items():
            self.deltas.setdefault(rule_id, RuleDelta()).add(delta)


def _ms(ts) -> int:
    if isinstance(ts, datetime):
        return int(ts.timestamp() * 1000)
    return int(ts)


def count(counts: Iterable[RuleCount], summary: BatchSummary, tally: UsageTally) -> None:
    """The evaluation's figures per rule (matched, passed, failed, units) into the summary."""
    deltas = summary.deltas
    for rule_count in counts:
        delta = deltas.setdefault(rule_count.rule_id, RuleDelta())
        delta.matched += rule_count.matched
        delta.passed += rule_count.passed
        delta.failed += rule_count.failed
        if rule_count.last_error:
            delta.last_error = rule_count.last_error
        summary.matched += rule_count.matched
        summary.passed += rule_count.passed
        summary.failed += rule_count.failed
        tally.add(rule_count.tenant, rules_triggered=rule_count.units)
        for username, units in rule_count.by_user.items():
            tally.add_device(rule_count.tenant, device_of_username(username), rules_triggered=units)


def jobs_of(
    specs: Mapping[int, RuleSpec], passed_rows: Iterable[tuple], batch: int | None = None
) -> Iterator[Job]:
    """One job per output of each passed row and action of its rule. A row is (rule id, ts,
    outputs JSON[, message id[, topic, client id[, username]]]); with a message id, each job
    carries its action ledger key; with the topic and client id, its journey rows name them;
    with the username, its publisher's device, which the action is metered to."""
    for row in passed_rows:
        rule_id, ts, outputs_json = row[0], row[1], row[2]
        message_id = row[3] if len(row) > 3 else None
        topic, client_id = (row[4], row[5]) if len(row) > 5 else (None, None)
        device = device_of_username(row[6]) if len(row) > 6 else None
        spec = specs.get(rule_id)
        if spec is None or not spec.actions:
            continue
        ts_ms = _ms(ts)
        for index, output in enumerate(json.loads(outputs_json or "[]")):
            if not isinstance(output, dict):
                output = {"value": output}
            for position, action in enumerate(spec.actions):
                key = None
                if message_id is not None:
                    key = ActionKey(spec.id, spec.version, message_id, index, position, ts_ms)
                yield Job(
                    spec.id,
                    spec.tenant,
                    spec.client_prefix,
                    action,
                    output,
                    ts_ms,
                    key=key,
                    topic=topic,
                    client_id=client_id,
                    device=device,
                    rule_name=spec.name,
                    batch=batch,
                    action_index=position,
                )


def account(outcomes: Iterable[Outcome], summary: BatchSummary, tally: UsageTally) -> None:
    """Finished actions into the summary (counters, latencies, dead letters) and the tally."""
    for outcome in outcomes:
        _account(outcome, summary.deltas, summary, summary.letters, tally)
    summary.dead_letters = len(summary.letters)


def process(
    specs: Mapping[int, RuleSpec],
    counts: Iterable[RuleCount],
    passed_rows: Iterable[tuple],
    runner: ActionRunner | None,
    tally: UsageTally,
    gate: Gate | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> BatchSummary:
    """A backfill chunk: counts, then its actions run to the end, ACTION_CHUNK at a time; `gate`
    decides which fire (every one without it); `should_stop` is asked between groups (a
    cancelled run stops there: what ran is accounted, the rest is not run)."""
    summary = BatchSummary()
    count(counts, summary, tally)
    if runner is None and (gate is None or gate.fires):
        return summary
    jobs: list[Job] = []

    def run(group: list[Job]) -> None:
        admitted, skipped = gate.admit(group) if gate is not None else (group, 0)
        summary.actions_skipped += skipped
        if admitted:
            assert runner is not None
            outcomes = runner.run(admitted)
            if gate is not None:
                gate.settle(outcomes)
            account(outcomes, summary, tally)

    stop = should_stop or (lambda: False)
    try:
        for job in jobs_of(specs, passed_rows):
            jobs.append(job)
            if len(jobs) >= ACTION_CHUNK:
                run(jobs)
                jobs = []
                if stop():
                    break
        else:
            if jobs:
                run(jobs)
    except Exception:
        # A cancel stops the Spark job streaming the rows: what ran is accounted, the rest
        # never fired. Any other failure is the caller's.
        if not stop():
            raise
    summary.dead_letters = len(summary.letters)
    return summary


def _account(
    outcome: Outcome,
    deltas: dict[int, RuleDelta],
    summary: BatchSummary,
    letters: list,
    tally: UsageTally,
) -> None:
    job = outcome.job
    delta = deltas.setdefault(job.rule_id, RuleDelta())
    lag = (outcome.done_ms or int(time.time() * 1000)) - job.ts_ms
    delta.lag_ms = max(delta.lag_ms or 0, lag)
    delta.latencies_ms.append(lag)
    summary.latencies_ms.append(lag)
    tally.add(job.tenant, actions_executed=1)
    if job.device is not None:
        tally.add_device(job.tenant, job.device, actions_executed=1)
    if outcome.ok:
        delta.actions_ok += 1
        summary.actions_ok += 1
        return
    delta.actions_failed += 1
    summary.actions_failed += 1
    delta.last_error = f"{job.action.get('type')}: {outcome.error}"
    # Every output an action could not deliver is kept, to be seen (and replayed) by the tenant.
    letters.append(
        DeadLetter(
            job.rule_id,
            job.tenant,
            job.action,
            job.output,
            outcome.error,
            outcome.attempts,
            output_json(job.output) if job.action.get("type") == "webhook" else "",
            key=job.key.encode() if job.key is not None else "",
        )
    )

"""Backfill: the live rules' plan over [from, to) of the archive's history.

The one path of every run over history: `manage.py run_rules` (the operator's) and a tenant's
run (`POST /api/v1/rules/{name}/runs`, a Celery task: `tenants.rules.runs.execute`) both call
`run_backfill`.

Rules come from the database (`--tenant`, `--rule` narrow them; a rule named explicitly runs even
when disabled). Only those rules' tenants are listed and read. The range is read in chunks of hours
(≤ `max_chunks`, balanced by file count, two files per core at least) so the caller can show
progress; each chunk is one Spark job for the counts and, when a rule has actions, a streamed pass
over the passed rows. `actions` says which actions fire (`firing.py`: all, new-only, none);
`only_action` (1-based) narrows them to that action of each rule (a re-send to one sink).

Sink actions (issue 47): their outputs go to their sinks' durable outboxes (`outbox.py`), with
their action-ledger keys, in the backfill's own `SinkOutbox` (the ledger says `run`, the run's
id); the live job's sender delivers them. Without a database, a sink's output fails in words.

Cancelling (`should_stop`): asked before each chunk and between groups of actions; with a
`job_group`, the Spark jobs of this thread run in that group, so another thread can cancel the
one under way (`cancel_job_group`). A cancelled backfill returns its summary so far with
`"cancelled": true`: what it counted and fired before is accounted and metered, nothing after.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from common.archive.files import ArchiveFile
from common.archive.schema import MESSAGE_ID
from common.stores.object_store import ObjectStore
from spark.archive import list_archive, read_archive, readable_copy
from spark.rules import firing
from spark.rules import store as db
from spark.rules.actions import ActionRunner
from spark.rules.bookkeeping import Books
from spark.rules.ledger import RUN
from spark.rules.metering import UsageWriter
from spark.rules.outbox import SinkOutbox
from spark.rules.plan import (
    PASSED,
    RulePlan,
    RuleSpec,
    compile_specs,
    rule_counts,
    rule_outputs,
)
from spark.rules.runner import BatchSummary, RuleCount, process


class NoRules(LookupError):
    pass


def cancel_job_group(spark: SparkSession, group: str) -> None:
    """Cancel the Spark jobs running in `group` (a backfill given that `job_group`)."""
    spark.sparkContext.cancelJobGroup(group)


@dataclass
class Progress:
    chunk: int
    chunks: int
    rows_read: int
    summary: BatchSummary = field(repr=False, default_factory=BatchSummary)


def chunked(
    listing: list[ArchiveFile], max_chunks: int, min_files: int = 1
) -> list[list[ArchiveFile]]:
    """Whole hours per chunk, about len(listing) / max_chunks files each (a progress step), and at
    least `min_files` each: a history part is one row group of up to a million rows, which Spark
    reads as one task, so a chunk of fewer files than cores leaves cores idle."""
    target = max(1, min_files, -(-len(listing) // max_chunks))
    chunks: list[list[ArchiveFile]] = []
    for file in listing:
        if chunks and (len(chunks[-1]) < target or chunks[-1][-1].hour == file.hour):
            chunks[-1].append(file)
        else:
            chunks.append([file])
    return chunks


def run_backfill(
    spark: SparkSession,
    dsn: str | None,
    store: ObjectStore,
    start_ms: int,
    end_ms: int,
    *,
    tenant: str | None = None,
    rule: str | None = None,
    specs: list[RuleSpec] | None = None,
    runner: ActionRunner | None = None,
    progress: Callable[[Progress], None] | None = None,
    max_chunks: int = 20,
    actions: str = firing.ALL,
    should_stop: Callable[[], bool] | None = None,
    job_group: str | None = None,
    run_id: str | None = None,
    only_action: int | None = None,
) -> dict:
    """Runs the rules over the range; returns the summary (JSON-able). `run_id`: the RuleRun
    this is, which owns the `new-only` claims in the action ledger until they are confirmed.
    `only_action`: fire that action (from 1) of each rule only (None: every action)."""
    started = time.monotonic()
    conn = db.connect(dsn) if dsn else None
    gate = firing.Gate(
        actions, (lambda: db.connect(dsn)) if dsn else None, run_id, only_action=only_action
    )
    if job_group is not None:
        spark.sparkContext.setJobGroup(job_group, "rules over history", interruptOnCancel=True)
    stop = should_stop or (lambda: False)
    cancelled = False
    try:
        if specs is None:
            assert conn is not None, "rules come from the database"
            specs = db.load_rules(conn, tenant=tenant, rule=rule, enabled_only=rule is None)
        if not specs:
            raise NoRules("no matching rules" + (f" for tenant {tenant!r}" if tenant else ""))
        good, compile_errors = compile_specs(specs)
        tenant_of = {s.id: s.tenant for s in specs}
        books = Books()
        by_id = {s.id: s for s in good}
        tenants = sorted({s.tenant for s in good})
        listing = list_archive(store, tenants, start_ms, end_ms)
        # Two files per core and chunk: every core busy, even with files of unequal sizes.
        chunks = chunked(listing, max_chunks, 2 * spark.sparkContext.defaultParallelism)
        usage = UsageWriter(store, "rules-backfill")
        total = BatchSummary()
        rows_read = 0
        with_actions = sorted(s.id for s in good if s.actions)
        own_runner = runner is None and bool(with_actions) and gate.fires
        outbox = SinkOutbox(dsn, RUN, run_id) if own_runner and dsn else None
        if own_runner:
            runner = ActionRunner(store, outbox=outbox)
        if progress is not None:
            progress(Progress(0, len(chunks), 0, total))
        try:
            for index, chunk in enumerate(chunks, 1):
                if stop():
                    cancelled = True
                    break
                try:
                    # on S3 with Spark in local mode, read from a local copy of the chunk
                    with readable_copy(spark, store, chunk) as source:
                        summary, read = _chunk(
                            spark,
                            source,
                            tenants,
                            start_ms,
                            end_ms,
                            chunk,
                            good,
                            by_id,
                            with_actions,
                            runner,
                            gate,
                            usage,
                            stop,
                        )
                except Exception:
                    if stop():  # the job group was cancelled under it
                        cancelled = True
                        break
                    raise
                rows_read += read
                books.add(summary.deltas, tenant_of, summary.letters)
                books.flush(conn)
                total.add(summary)
                if progress is not None:
                    progress(Progress(index, len(chunks), rows_read, total))
                if stop():
                    cancelled = True
                    break
        finally:
            gate.close()
            if job_group is not None:
                spark.sparkContext.setLocalProperty("spark.jobGroup.id", None)
            if own_runner and runner is not None:
                runner.close()
            if outbox is not None:
                outbox.close()
        if compile_errors:
            errors = {i: db.RuleDelta(last_error=e) for i, e in compile_errors.items()}
            books.add(errors, tenant_of)
        if conn is not None and not books.flush(conn):
            raise RuntimeError(
                "the rules ran, but their counters and dead letters could not be written "
                "(the database refused them: see the log)"
            )
        return {
            "from": start_ms,
            "to": end_ms,
            "rules": len(good),
            "rows_read": rows_read,
            "matched": total.matched,
            "passed": total.passed,
            "failed": total.failed,
            "actions_ok": total.actions_ok,
            "actions_failed": total.actions_failed,
            "actions_skipped": total.actions_skipped,
            "actions": actions,
            "only_action": only_action,
            "dead_letters": total.dead_letters,
            "unrecorded": gate.unrecorded,  # successes the action ledger could not take
            "cancelled": cancelled,
            "compile_errors": {str(k): v for k, v in compile_errors.items()},
            "per_rule": {
                str(rule_id): {
                    "tenant": by_id[rule_id].tenant if rule_id in by_id else None,
                    "name": by_id[rule_id].name if rule_id in by_id else None,
                    "version": by_id[rule_id].version if rule_id in by_id else None,
                    "matched": d.matched,
                    "passed": d.passed,
                    "failed": d.failed,
                    "actions_ok": d.actions_ok,
                    "actions_failed": d.actions_failed,
                }
                for rule_id, d in sorted(total.deltas.items())
            },
            "seconds": round(time.monotonic() - started, 3),
        }
    finally:
        if conn is not None:
            conn.close()


def _chunk(
    spark: SparkSession,
    store: ObjectStore,
    tenants: list[str],
    start_ms: int,
    end_ms: int,
    chunk: list[ArchiveFile],
    good: list[RuleSpec],
    by_id: dict[int, RuleSpec],
    with_actions: list[int],
    runner: ActionRunner | None,
    gate: firing.Gate,
    usage: UsageWriter,
    stop: Callable[[], bool],
) -> tuple[BatchSummary, int]:
    """One chunk of hours: read, evaluated, counted, its actions through the gate, metered."""
    frame = read_archive(spark, store, tenants, start_ms, end_ms, listing=chunk)
    read = frame.count()
    results = None
    if with_actions:
        results = rule_outputs(frame, good).persist()
        counts = _counts(results)
        passed = (
            (r[0], r[1], r[2], r[3], None, None, r[4])  # the username: the action's device
            for r in results.where(
                (F.col("status") == PASSED) & F.col("rule_id").isin(with_actions)
            )
            .select("rule_id", "ts", "outputs", MESSAGE_ID, "username")
            .toLocalIterator()
        )
    else:
        counts = _native_first_counts(RulePlan(frame, good))
        passed = ()
    tally = usage.new_tally()
    try:
        summary = process(by_id, counts, passed, runner, tally, gate, stop)
    finally:
        # Metered even when a cancel ends the chunk early: what was evaluated and fired is work.
        usage.flush(tally)
        if results is not None:
            results.unpersist()
    return summary, read


def _counts(results) -> list[RuleCount]:
    """Per rule, summed over its publishers (`rule_counts` has a row per rule and username)."""
    counts: dict[int, RuleCount] = {}
    for r in rule_counts(results).collect():
        count = counts.setdefault(
            r["rule_id"], RuleCount(r["rule_id"], r["tenant"], 0, 0, 0, None, 0)
        )
        count.matched += r["matched"] or 0
        count.passed += r["passed"] or 0
        count.failed += r["failed"] or 0
        count.last_error = r["last_error"] or count.last_error
        count.units += r["units"] or 0
        count.add_user(r["username"], r["units"] or 0)
    return list(counts.values())


def _native_first_counts(plan: RulePlan) -> list[RuleCount]:
    """The counts in one native pass; a second pass through the Python evaluator only when some
    (rule, row) was left to it (a rule with no native form, or a row a native rule is not sure
    of): with rules that compile natively over well-formed payloads, no Python worker runs."""
    if plan.marked is None:
        return _counts(plan.evaluated())
    rows = plan.native_counts()
    counts = {
        r["rule_id"]: RuleCount(
            r["rule_id"],
            r["tenant"],
            r["matched"],
            r["passed"],
            0,
            None,
            r["units"],
            dict(r["by_user"]),
        )
        for r in rows
    }
    if any(r["pending"] for r in rows):
        for extra in _counts(plan.evaluated()):
            count = counts.setdefault(
                extra.rule_id, RuleCount(extra.rule_id, extra.tenant, 0, 0, 0, None, 0)
            )
            count.matched += extra.matched
            count.passed += extra.passed
            count.failed += extra.failed
            count.units += extra.units
            for username, units in extra.by_user.items():
                count.add_user(username, units)
            count.last_error = extra.last_error or count.last_error
    return [c for c in counts.values() if c.matched]

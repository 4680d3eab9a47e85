"""The live job: ONE Structured Streaming query for every tenant's enabled rules.

Source: the brokers' live segments (`archive/live/…/*.parquet`, file stream source, schema given),
a micro-batch about every second. In each batch (`foreachBatch`, on the driver):

1. the enabled rules — a one-row probe of `tenants_rule` each batch, a reload only when it
   changed, so adding, editing, disabling or deleting a rule applies to the next batch without a
   restart;
2. `rule_outputs` over the batch (the same plan as the backfill and the dry run's semantics);
3. the actions, handed to their tenants' lanes (`lanes.py`: asynchronous, bounded per tenant,
   retried from a durable queue), and the batch goes on; the counters (`tenants_rulemetrics`
   UPSERT increments, lag = action done − message ts), dead letters, usage rows (`rules-live`,
   with the bytes bucket sinks took since: `metering.SinkBytes`) and Prometheus figures of the batch and of every action finished are recorded each batch and
   every 0.5 s between batches (`record`), and each action that succeeded goes to the action
   ledger (`ledger.py`: keyed by rule version and message id, so `new-only` runs over history
   never repeat it);
4. the tenants' journey gets what the rules did with each message (`journey.py`: matched or
   failed, then each action's result), a segment every 2 s beside the broker's.

The checkpoint (default `.data/spark/rules-live`) remembers which segments were done, so a restart
neither repeats nor skips a batch's actions (segments written while it was down are picked up).
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pyarrow as pa
import pyarrow.parquet as pq
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from common.archive.schema import (
    ARCHIVE_SCHEMA,
    EVENT_PUBLISH,
    HISTORY_SCHEMA,
    LIVE_PREFIX,
    MESSAGE_ID,
)
from common.sinks import SINK_NAMES
from common.stores.object_store import LocalObjectStore, ObjectStore
from spark.archive import live_stream, spark_schema
from spark.rules import ledger
from spark.rules import store as db
from spark.rules.actions import ActionRunner
from spark.rules.alarms import split as split_alarms
from spark.rules.bookkeeping import Books
from spark.rules.feed import (
    FeedProgress,
    FeedReader,
    Positions,
    id_at,
    id_time,
    spark_table,
    stream_id,
)
from spark.rules.journey import RuleJourney
from spark.rules.lanes import ActionLanes
from spark.rules.live_alarms import FEED_LAG, LiveAlarms
from spark.rules.metering import SinkBytes, UsageWriter
from spark.rules.outbox import SinkOutbox
from spark.rules.pausing import BudgetWatch
from spark.rules.plan import (
    PASSED,
    RuleSpec,
    collect_outputs,
    compile_specs,
    outputs_in_phases,
    rule_outputs,
    tenant_share_seconds,
)
from spark.rules.results import BatchResults
from spark.rules.retry_store import RetryStore
from spark.rules.runner import ACTION_CHUNK, BatchSummary, RuleCount, account, jobs_of
from spark.rules.runner import count as count_rows
from spark.rules.sink_sender import SinkSender
from spark.session import in_process

T = TypeVar("T")
log = logging.getLogger("spark.rules.live")
PREPARE_EVERY = 0.25  # seconds between looks for changed rules (a version probe each)
FEED_ONE_TASK_ROWS = 1_000
FEED_READ_ENTRIES = 256  # entries (each a broker's hand-off, ~20 ms) one micro-batch takes
DEFAULT_CHECKPOINT = Path(__file__).resolve().parents[2] / ".data" / "spark" / "rules-live"


class RuleCache:
    """The enabled rules, reloaded when the cheap version probe changes."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.conn = None
        self.version: tuple | None = None
        self.specs: list[RuleSpec] = []
        self.errors: dict[int, str] = {}
        self.tenants: dict[int, str] = {}  # every loaded rule's tenant, compiled or not

    def connection(self):
        if self.conn is None or self.conn.closed:
            self.conn = db.connect(self.dsn)
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def current(self) -> tuple[list[RuleSpec], dict[int, str]]:
        """(rules that compile, compile errors new since the last reload)."""
        try:
            conn = self.connection()
            version = db.rules_version(conn)
            if version == self.version:
                return self.specs, {}
            specs = db.load_rules(conn)
        except Exception as exc:  # the database away: keep serving the rules we have
            log.warning("rules not reloaded: %s", exc)
            self.conn = None
            return self.specs, {}
        self.specs, self.errors = compile_specs(specs)
        self.tenants = {s.id: s.tenant for s in specs}
        self.version = version
        log.info("rules loaded: %d enabled, %d do not compile", len(self.specs), len(self.errors))
        return self.specs, self.errors


class RecentLatency:
    """Per rule, publish → action done of the actions of the last `window` seconds (at most
    `per_rule` of them): the p50 and p99 the rule's page shows."""

    def __init__(self, window: float = 300.0, per_rule: int = 10_000) -> None:
        self.window, self.per_rule = window, per_rule
        self._samples: dict[int, deque[tuple[float, int]]] = {}

    def add(self, rule_id: int, latencies_ms: list[int]) -> tuple[int, int]:
        now = time.monotonic()
        samples = self._samples.setdefault(rule_id, deque(maxlen=self.per_rule))
        samples.extend((now, lag) for lag in latencies_ms)
        while samples and samples[0][0] < now - self.window:
            samples.popleft()
        ordered = sorted(lag for _, lag in samples)
        return ordered[len(ordered) // 2], ordered[min(len(ordered) - 1, len(ordered) * 99 // 100)]


class LiveMetrics:
    """Per-rule figures for Prometheus (labels tenant, rule), plus the action latency."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["tenant", "rule"]
        self.counters = {
            name: Counter(f"rules_{name}", help_, labels, registry=self.registry)
            for name, help_ in (
                ("matched", "Rows a rule's FROM took"),
                ("passed", "Rows whose WHERE held"),
                ("failed", "Rows whose evaluation failed"),
                ("actions_ok", "Action runs that succeeded"),
                ("actions_failed", "Action runs that failed after retries"),
            )
        }
        self.lag = Gauge(
            "rules_lag_ms", "Publish → action, last batch", labels, registry=self.registry
        )
        self.latency = Histogram(
            "rules_action_latency_seconds",
            "Message timestamp to action done",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 30, 60),
            registry=self.registry,
        )
        self.batches = Counter("rules_batches", "Micro-batches processed", registry=self.registry)
        self.batch_failures = Counter(
            "rules_batch_failures",
            "Micro-batches that failed after retries",
            registry=self.registry,
        )
        self.batch_retries = Counter(
            "rules_batch_retries", "Micro-batch evaluations retried", registry=self.registry
        )
        # The time window of the last failed batch: `run_rules --from/--to` re-runs it.
        self.failed_from = Gauge(
            "rules_failed_batch_from_seconds",
            "Oldest message of the last failed batch (Unix time)",
            registry=self.registry,
        )
        self.failed_to = Gauge(
            "rules_failed_batch_to_seconds",
            "Just after the newest message of the last failed batch (Unix time)",
            registry=self.registry,
        )
        self.enabled = Gauge("rules_enabled", "Enabled rules being served", registry=self.registry)
        self.feed_batch = Histogram(
            "rules_feed_batch_seconds",
            "One micro-batch of the live feed: read to actions handed over",
            buckets=(0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 1, 2, 5),
            registry=self.registry,
        )
        self.feed_rows = Counter(
            "rules_feed_rows", "Rows read from the live feed", registry=self.registry
        )
        self.feed_gaps = Counter(
            "rules_feed_gaps",
            "Times the live feed had trimmed entries this job had not read",
            registry=self.registry,
        )
        self.alarm_clock = Gauge(
            "rules_alarm_clock_behind_seconds",
            "How far the alarms' clock (the feed writers' lowest mark) is behind now",
            registry=self.registry,
        )
        self.paused = Counter(
            "rules_paused", "Rules paused for going over their budget", registry=self.registry
        )
        self.backlog = Gauge(
            "rules_action_backlog",
            "Actions queued or running in a tenant's lane (the durable queue not counted)",
            ["tenant"],
            registry=self.registry,
        )

    def observe(self, specs: dict[int, RuleSpec], summary: BatchSummary) -> None:
        for rule_id, delta in summary.deltas.items():
            spec = specs.get(rule_id)
            if spec is None:
                continue
            labels = (spec.tenant, spec.name)
            for name, counter in self.counters.items():
                value = getattr(delta, name)
                if value:
                    counter.labels(*labels).inc(value)
            if delta.lag_ms is not None:
                self.lag.labels(*labels).set(delta.lag_ms)
        for lag in summary.latencies_ms:
            self.latency.observe(lag / 1000)


class LiveJob:
    def __init__(
        self,
        spark: SparkSession,
        dsn: str,
        store: ObjectStore,
        *,
        checkpoint: str | Path = DEFAULT_CHECKPOINT,
        trigger_seconds: float = 1.0,
        runner: ActionRunner | None = None,
        lanes: ActionLanes | None = None,
        metrics: LiveMetrics | None = None,
        journey: RuleJourney | None = None,
        max_file_age: str = "1h",
        attempts: int = 3,
        backoff: float = 1.0,
        feed: FeedReader | None = None,
    ) -> None:
        self.spark, self.dsn, self.store = spark, dsn, store
        # The live feed (a Redis stream the brokers write the rules' rows to): read in a loop of
        # micro-batches, back to back; None: the archive's live segments, as a file stream.
        self.feed = feed
        self.checkpoint = str(checkpoint)
        self.trigger_seconds = trigger_seconds
        self.metrics = metrics or LiveMetrics()
        self.rules = RuleCache(dsn)
        # Actions run asynchronously, per tenant (lanes.py): a batch hands them over and goes
        # on; their outcomes are recorded as they complete (`record`), batch or no batch.
        retries = RetryStore(dsn)
        # Sinks' outputs go to their durable outboxes (outbox.py), which the sender delivers.
        self.outbox = SinkOutbox(dsn)
        if lanes is None:
            lanes = (
                ActionLanes.like(runner, retries=retries, resolve=self._resolve, outbox=self.outbox)
                if runner is not None
                else ActionLanes(store, retries=retries, resolve=self._resolve, outbox=self.outbox)
            )
        elif lanes.outbox is None:
            lanes.outbox = self.outbox
        self.runner = runner
        self.lanes = lanes
        self._record_lock = threading.Lock()
        self._books_conn = None
        self._recorder: threading.Thread | None = None
        self.usage = UsageWriter(store, "rules-live")
        self.max_file_age = max_file_age
        self.attempts, self.backoff = max(1, attempts), backoff
        self.failed_windows: list[tuple[datetime, datetime]] = []  # the last 100
        self.query = None
        self.total = BatchSummary()
        self.batches = 0
        self.last_batch_error: str | None = None
        self.not_before: datetime | None = None
        self._usage_backlog: list = []
        self.books = Books()
        self.ledger = ledger.Pending()  # actions done, for the action ledger
        self.watch = BudgetWatch()
        self.journey = journey if journey is not None else RuleJourney(store)
        # What bucket sinks took, metered as bytes (the sender's workers add, `record` drains).
        self.sink_bytes = SinkBytes()
        self.sinks = SinkSender(dsn, self.journey, metered=self.sink_bytes.add)
        self.outbox.on_append = self.sinks.wake
        self._stop = threading.Event()
        self.progress = FeedProgress()
        self.lanes.on_settled = self.progress.settle
        self.positions = Positions(feed.key if feed is not None else "")
        self._acted: str | None = None  # the feed's positions, written with the counters
        self._evaluated: str | None = None
        self._batch_position: str | None = None  # the feed batch being handled: its last id
        self._replay_until: str | None = None  # entries up to it were counted before a restart
        self._feed_thread: threading.Thread | None = None
        self._feed_error: BaseException | None = None
        self._warm_frame: DataFrame | None = None  # a row of no tenant: `_prepare` runs on it
        self._prepared: list[RuleSpec] | None = None  # the rules `_prepare` compiled last
        self._preparer: threading.Thread | None = None
        self.gaps = 0
        self.recent = RecentLatency()
        # The tenants' alarms (live_alarms.py): read in the rules' plan, each key's state kept
        # by the job and written with the batch's position. A file-stream batch's position is
        # its id.
        self.alarms = LiveAlarms(
            dsn, store, feed.key if feed is not None else "files", self.usage, self.journey,
            lambda tally: self.record(tally=tally),
        )  # fmt: skip
        self._batch_last: str | None = None  # the feed batch being handled: its last id

    def handle_batch(self, batch: DataFrame, batch_id: int, replay: bool = False) -> None:
        # A batch is first *evaluated* (the rules' probe, the Spark plan, collected): no side
        # effect yet, so a failure there (the database or a worker away for a moment) is retried,
        # up to `attempts` times with doubling back-off. Then its actions and counters run once:
        # retrying them could repeat actions already done. A batch that still fails is logged
        # with its time window and counted, never raised — one bad batch must not end the query
        # that serves every tenant; its messages stay in the archive and
        # `run_rules --from/--to` over the logged window runs them again.
        # With the live feed a batch is evaluated in two phases (`outputs_in_phases`): what the
        # native plans answered is acted on first, then the Python pass's results (retried on
        # their own: the first phase's actions are handed over already).
        # The alarms' results are taken out of the rules' (`split_alarms`) and read once both
        # phases are in: a key's messages in time order.
        started = time.monotonic()
        try:
            specs, results, later = self._with_retries(lambda: self._evaluate(batch), batch_id)
            results, alarm_rows = split_alarms(results)
            tracked = batch_id if self.feed is not None else None
            if specs:
                self._act(specs, results, tracked, replay, last=later is None)
            if later is not None:
                rest = self._with_retries(lambda: BatchResults.of(later()), batch_id)
                rest, more = split_alarms(rest)
                alarm_rows += more
                if specs:
                    self._act(specs, rest, tracked, replay)
            self.alarms.take(alarm_rows, self._batch_last if tracked else f"{batch_id}-0")
            self.batches += 1
            self.metrics.batches.inc()
            log.debug("batch %s done in %.2fs", batch_id, time.monotonic() - started)
        except Exception as exc:
            self.last_batch_error = f"{type(exc).__name__}: {exc}"
            self.metrics.batch_failures.inc()
            self.rules.conn = None
            window = self._window(batch)
            if window is not None:
                self.failed_windows.append(window)
                del self.failed_windows[:-100]
                self.metrics.failed_from.set(window[0].timestamp())
                self.metrics.failed_to.set(window[1].timestamp())
                log.error(
                    "batch %s failed (%s); its messages are in the archive: re-run them with "
                    "manage.py run_rules --from %s --to %s",
                    batch_id,
                    self.last_batch_error,
                    window[0].isoformat(),
                    window[1].isoformat(),
                    exc_info=True,
                )
            else:
                log.exception("batch %s failed (its time window unknown)", batch_id)

    def _with_retries(self, evaluate: Callable[[], T], batch_id: int) -> T:
        for attempt in range(1, self.attempts + 1):
            try:
                return evaluate()
            except Exception as exc:
                self.rules.conn = None
                if attempt == self.attempts or self._stop.is_set():
                    raise
                self.metrics.batch_retries.inc()
                delay = self.backoff * 2 ** (attempt - 1)
                log.warning(
                    "batch %s: attempt %d failed (%s), retrying in %.1fs",
                    batch_id,
                    attempt,
                    exc,
                    delay,
                )
                self._stop.wait(delay)
        raise AssertionError("unreachable")

    @staticmethod
    def _window(batch: DataFrame) -> tuple[datetime, datetime] | None:
        """[oldest, newest + 1 ms) of the batch's messages (what a backfill must re-run)."""
        try:
            low, high = batch.agg(F.min("ts"), F.max("ts")).first()
        except Exception:
            return None
        if low is None:
            return None
        return low.astimezone(UTC), high.astimezone(UTC) + timedelta(milliseconds=1)

    def _current_rules(self) -> list[RuleSpec]:
        """The enabled rules (reloaded when they changed); those that no longer compile get
        their error in their counters."""
        specs, compile_errors = self.rules.current()
        if compile_errors:
            errors = {i: db.RuleDelta(last_error=e) for i, e in compile_errors.items()}
            self.books.add(errors, self.rules.tenants)
        return specs

    def _prepare(self) -> None:
        """A rule saved, enabled or edited gets its plan built and compiled (the driver's plan,
        the Python workers' rules) on rows of no tenant, beside the feed's batches
        (`_prepare_loop`): the batches take a new rule set at once, as they always did (a
        message published after the save is evaluated by the rule), and what this compiles
        meanwhile the first batches that need it find done rather than make."""
        specs = self._current_rules()
        if specs is self._prepared or self._warm_frame is None:
            return
        self._prepared = specs
        if specs:
            started = time.monotonic()
            for _ in range(2):  # the plan made, then reused once: both shapes compiled
                collect_outputs(self._warm_frame, specs, tenant_share_seconds(), reuse=True)
            log.info("rules prepared in %.2fs", time.monotonic() - started)

    def _prepare_loop(self) -> None:
        while not self._stop.wait(PREPARE_EVERY):
            try:
                self._prepare()
            except Exception:  # the batches build the plan themselves then
                log.warning("rules not prepared ahead", exc_info=True)
                if self._stop.wait(PREPARE_EVERY * 4):
                    return

    def _evaluate(
        self, batch: DataFrame
    ) -> tuple[list[RuleSpec], BatchResults, Callable[[], list] | None]:
        specs = self._current_rules()
        alarms = self.alarms.rules(self.rules.connection())
        if self.not_before is not None:
            batch = batch.where(F.col("ts") >= F.lit(self.not_before))
        self.metrics.enabled.set(len(specs))
        self.watch.serving(s.id for s in specs)
        if not specs and not alarms:
            return [], BatchResults(), None
        t0 = time.monotonic()
        first, later = evaluate_batch(
            batch, specs + alarms, reuse=self.feed is not None and self.not_before is None
        )
        results = BatchResults.of(first)
        if len(results) and log.isEnabledFor(logging.DEBUG):
            took = time.monotonic() - t0
            stamps = [r.ts for r in results.rows if r.ts is not None]
            newest = (
                f"; newest message {time.time() - took - max(stamps).timestamp():.2f}s old at "
                "batch start"
                if stamps
                else ""
            )
            log.debug("evaluated %d results in %.2fs%s", len(results), took, newest)
        return specs, results, later

    def _act(
        self,
        specs: list[RuleSpec],
        results: BatchResults,
        batch: int | None = None,
        replay: bool = False,
        last: bool = True,
    ) -> None:
        """Hand the batch's actions to the lanes and record its figures. `replay`: the batch was
        counted before a restart (`spark.rules.feed`): only its actions the ledger does not hold
        run, and nothing is counted again. `last`: these are the batch's last results (its
        feed position is counted with them; the first phase's are not)."""
        by_id = {s.id: s for s in specs}
        rows = results.rows
        if replay:
            self._replay(by_id, rows, batch)
            return
        self.journey.results(rows, {s.id: s.name for s in specs})
        counts: dict[int, RuleCount] = {}

        def evaluated(rule_id: int, tenant: str, username: str | None, n: int, units: int):
            count = counts.get(rule_id)
            if count is None:
                count = counts[rule_id] = RuleCount(rule_id, tenant, 0, 0, 0, None, 0)
            count.matched += n
            count.units += units
            count.add_user(username, units)
            return count

        for plain in results.skipped:  # WHERE did not hold: figures only
            evaluated(plain.rule_id, plain.tenant, plain.username, plain.count, plain.units)
        passed = []
        for row in rows:
            count = evaluated(row.rule_id, row.tenant, row.username, 1, row.units)
            if row.status == PASSED:
                count.passed += 1
                passed.append(
                    (
                        row.rule_id,
                        row.ts,
                        row.outputs,
                        row.message_id,
                        row.topic,
                        row.client_id,
                        row.username,
                    )
                )
            elif row.error:
                count.failed += 1
                count.last_error = row.error
        # The actions go to their tenants' lanes, which run them while the next batches are
        # evaluated; this batch waits for none of them.
        self._submit(jobs_of(by_id, passed, batch), batch)
        summary = BatchSummary()
        tally = self.usage.new_tally()
        count_rows(counts.values(), summary, tally)
        # Messages over their rule's budget: dead letters, and the rules that keep at it paused.
        over_letters, pauses = self.watch.batch(
            rows, by_id, also_evaluated={p.rule_id: p.count for p in results.skipped}
        )
        summary.letters += over_letters
        self.books.pause(pauses, {s.id: s.tenant for s in specs})
        self.metrics.paused.inc(len(pauses))
        self.record(summary, tally, position=self._batch_position if last else None)

    def _submit(self, jobs, batch: int | None) -> None:
        chunk: list = []
        for job in jobs:
            chunk.append(job)
            if len(chunk) >= ACTION_CHUNK:
                self._hand_over(chunk, batch)
                chunk = []
        self._hand_over(chunk, batch)

    def _hand_over(self, chunk: list, batch: int | None) -> None:
        if batch is not None and chunk:
            self.progress.add(batch, len(chunk))  # before the lanes can settle any of them
        self.lanes.submit(chunk)

    def _replay(self, by_id: dict[int, RuleSpec], rows: list, batch: int | None) -> None:
        passed = [
            (r.rule_id, r.ts, r.outputs, r.message_id, r.topic, r.client_id, r.username)
            for r in rows
            if r.status == PASSED
        ]
        jobs = list(jobs_of(by_id, passed, batch))
        keys = [j.key for j in jobs if j.key is not None]
        if keys:
            conn = self.rules.connection()
            done = ledger.fired(conn, keys)
            jobs = [j for j in jobs if j.key is None or j.key not in done]
        log.info("replayed a batch counted before the restart: %d action(s) not done", len(jobs))
        self._submit(jobs, batch)

    def record(
        self, summary: BatchSummary | None = None, tally=None, position: str | None = None
    ) -> None:
        """Write what happened: the batch's figures (if any) and every action finished since
        the last call. The bill first, in the object store; then counters and dead letters, per
        tenant, kept for the next call if the database is away: neither can lose the other.
        With the live feed, its positions after them (`position`: the batch's last entry, now
        counted)."""
        with self._record_lock:
            # Asked before the outcomes are taken: a batch settled by now has its outcomes
            # among them (the lanes add an outcome before they settle its job).
            acted = self.progress.acted()
            if acted is not None:
                self._acted = acted
            if position is not None:
                self._evaluated = position
            summary = summary if summary is not None else BatchSummary()
            tally = tally if tally is not None else self.usage.new_tally()
            outcomes = self.lanes.completed()
            account(outcomes, summary, tally)
            # What succeeded is done: a `new-only` run over history will not do it again.
            self.ledger.add(o.job.key for o in outcomes if o.ok and o.job.key is not None)
            self.journey.actions(outcomes, {s.id: s.name for s in self.rules.specs})
            self.journey.flush()
            self.sink_bytes.drain_into(tally)
            self._flush_usage(tally)
            tenants = dict(self.rules.tenants)
            for rule_id, delta in summary.deltas.items():
                tenants.setdefault(rule_id, "")
                if delta.latencies_ms:
                    p50, p99 = self.recent.add(rule_id, delta.latencies_ms)
                    delta.latency_p50_ms, delta.latency_p99_ms = p50, p99
                    delta.latencies_ms = []
            self.books.add(summary.deltas, tenants, summary.letters)
            self._flush_books()
            self.alarms.record(self.feed is None, self.trigger_seconds)
            self.metrics.observe({s.id: s for s in self.rules.specs}, summary)
            for tenant, waiting in self.lanes.backlog().items():
                self.metrics.backlog.labels(tenant).set(waiting)
            self.total.add(summary)

    def _count_to(self, position: str) -> None:
        """Entries up to `position` held nothing to evaluate: counted, written at the next
        record."""
        with self._record_lock:
            self._evaluated = position

    def _resolve(self, rule_id: int, action: dict) -> dict | None:
        """The action of a rule as it is now (secret included) for an output that waited in the
        durable queue; None when the rule or that action is gone."""
        spec = next((s for s in self.rules.specs if s.id == rule_id), None)
        if spec is None:
            return None
        keys = {"webhook": "url", "republish": "topic", "dataset": "name", **SINK_NAMES}
        key = keys.get(str(action.get("type")))
        for candidate in spec.actions:
            if candidate.get("type") == action.get("type") and (
                key is None or candidate.get(key) == action.get(key)
            ):
                return candidate
        return None

    def _record_every(self, seconds: float = 0.5) -> None:
        while not self._stop.wait(seconds):
            try:
                self.record()
            except Exception:
                log.exception("action outcomes not recorded (kept for the next try)")

    def _flush_books(self) -> None:
        # Its own connection: `record` runs beside the batch's rules probe, in another thread.
        try:
            if self._books_conn is None or self._books_conn.closed:
                self._books_conn = db.connect(self.dsn)
        except Exception as exc:
            log.warning("rule counters and dead letters kept for the next batch: %s", exc)
            self._books_conn = None
            return
        if not self.books.flush(self._books_conn) or not self.ledger.flush(self._books_conn):
            self._books_conn.close()
            self._books_conn = None  # reconnect next time
            return
        if self.feed is not None and self._acted is not None and self._evaluated is not None:
            # After the counters and the ledger: what the positions pass is written down.
            try:
                self.positions.save(self._books_conn, self._acted, self._evaluated)
            except Exception as exc:
                log.warning("live feed position kept for the next batch: %s", exc)
                self._books_conn.close()
                self._books_conn = None

    def _flush_usage(self, tally) -> None:
        """Write this batch's usage and any a failed write left behind (kept, never dropped:
        it is the bill). A failure keeps them for the next batch."""
        self._usage_backlog.append(tally)
        while self._usage_backlog:
            try:
                self.usage.flush(self._usage_backlog[0])
            except Exception as exc:
                log.warning("usage not written (kept for the next batch): %s", exc)
                return
            self._usage_backlog.pop(0)

    def warm_up(self) -> None:
        """Run the whole batch path once before the stream starts, on a scratch Parquet file in
        local mode, on rows inside the plan for the feed and on a cluster: a cold first batch
        takes seconds (Python workers, the grammar, Parquet and codegen), and the first
        messages would queue behind it."""
        specs, _ = self.rules.current()
        warm = [RuleSpec(0, "$warm-up", "warm-up", 'SELECT * FROM "#"'), *specs]
        row = {
            "event": EVENT_PUBLISH,
            "tenant": "$warm-up",
            "ts": 0,
            "topic": "t",
            "payload": b"{}",
        }
        if self.feed is not None or not in_process(self.spark.sparkContext.master):
            # The feed's path: Arrow rows straight into Spark. And the file stream's on a
            # cluster: the rows travel inside the plan, for its executors could not read a
            # scratch file on the driver's disk.
            rows = [{**row, "ts": datetime.now(UTC), MESSAGE_ID: "warm-up:0"}] * 4
            frame = self._frame(spark_table([pa.Table.from_pylist(rows, schema=HISTORY_SCHEMA)]))
            if self.feed is None:
                for _ in range(2):
                    rule_outputs(frame, warm).collect()
                return
            self._warm_frame = frame
            for _ in range(3):
                collect_outputs(frame, warm)
                rule_outputs(frame, warm).collect()
            self._prepare()  # and the rules as they are now: the first batch finds them ready
            return
        # local mode (`local[…]`, the executors in this JVM): the file stream's own path, its
        # Parquet reader too, on a scratch file
        with tempfile.TemporaryDirectory(prefix="rules-warm-up-") as folder:
            table = pa.Table.from_pylist([row] * 4, schema=ARCHIVE_SCHEMA)
            for part in range(max(1, self.spark.sparkContext.defaultParallelism)):
                pq.write_table(table, f"{folder}/part-{part}.parquet")
            frame = self.spark.read.schema(spark_schema()).parquet(f"file://{folder}")
            for _ in range(2):
                rule_outputs(frame, warm).collect()

    def start(self) -> None:
        if self.feed is not None:
            self._start_feed()
            return
        # A first start (no checkpoint) serves what is published from now on (a minute's grace),
        # not the whole live folder: old messages are a backfill's, not a burst of stale actions.
        # A restart resumes from the checkpoint: nothing published while it was down is skipped.
        if not Path(self.checkpoint).exists():
            self.not_before = datetime.now(UTC) - timedelta(minutes=1)
        self.warm_up()
        if isinstance(self.store, LocalObjectStore):
            (self.store.root / LIVE_PREFIX).mkdir(parents=True, exist_ok=True)
        stream = live_stream(self.spark, self.store, self.max_file_age)
        self.query = (
            stream.writeStream.foreachBatch(self.handle_batch)
            .trigger(processingTime=f"{self.trigger_seconds} seconds")
            .option("checkpointLocation", self.checkpoint)
            .queryName("rules-live")
            .start()
        )
        self._recorder = threading.Thread(
            target=self._record_every, name="rule-outcomes", daemon=True
        )
        self._recorder.start()
        self.alarms.start()
        self.sinks.start()

    def _start_feed(self) -> None:
        """Read the live feed from where the job left it (`spark.rules.feed`)."""
        assert self.feed is not None
        self.warm_up()
        conn = db.connect(self.dsn)
        try:
            saved = self.positions.load(conn)
        finally:
            conn.close()
        if saved is None:
            # A first start serves what is published from now on (a minute's grace), not the
            # whole stream: older messages are a backfill's, not a burst of stale actions.
            after = id_at(int(time.time() * 1000) - 60_000)
            self._acted = self._evaluated = after
        else:
            after, evaluated = saved
            self._acted, self._evaluated = saved
            if stream_id(evaluated) > stream_id(after):
                self._replay_until = evaluated
            log.info("live feed: resuming after %s (counted up to %s)", after, evaluated)
        self._check_gap(after)
        self._feed_thread = threading.Thread(
            target=self._feed_loop, args=(after,), name="rules-feed", daemon=True
        )
        self._feed_thread.start()
        self._preparer = threading.Thread(
            target=self._prepare_loop, name="rules-prepare", daemon=True
        )
        self._preparer.start()
        self._recorder = threading.Thread(
            target=self._record_every, name="rule-outcomes", daemon=True
        )
        self._recorder.start()
        self.alarms.start()
        self.sinks.start()

    def _check_gap(self, after: str) -> None:
        """Entries Redis trimmed before the job read them (it was down or behind for longer
        than the stream keeps): counted, and named for a run over history."""
        assert self.feed is not None
        try:
            trimmed = self.feed.trimmed_after(after)
        except Exception as exc:
            log.warning("live feed: could not check for a gap: %s", exc)
            return
        if trimmed is None:
            return
        self.gaps += 1
        self.metrics.feed_gaps.inc()
        log.error(
            "live feed: the entries after %s up to %s were trimmed before this job read them; "
            "they are in the archive: run them with manage.py run_rules --from %s --to %s",
            after,
            trimmed,
            id_time(after).isoformat(),
            (id_time(trimmed) + timedelta(milliseconds=1)).isoformat(),
        )

    def _feed_loop(self, after: str) -> None:
        """Micro-batches back to back: whatever the feed holds after the last one (at most
        `FEED_READ_ENTRIES` entries), evaluated as one small Spark job."""
        assert self.feed is not None
        batch_id = 0
        checked = time.monotonic()
        try:
            while not self._stop.is_set():
                try:
                    last, table = self.feed.read(after, block_ms=200, count=FEED_READ_ENTRIES)
                except Exception as exc:
                    log.warning("live feed not read (%s); trying again", exc)
                    self._stop.wait(1.0)
                    continue
                if time.monotonic() - checked > 10:
                    checked = time.monotonic()
                    self._check_gap(after)
                if last == after:  # caught up, and no writer marked: the alarms' clock runs on
                    self._tick_alarms(None, idle=True)
                    continue
                batch_id += 1
                replay = self._replay_until is not None and stream_id(last) <= stream_id(
                    self._replay_until
                )
                self.progress.open(batch_id, last)
                self._batch_position = None if replay else last
                self._batch_last = last
                started = time.monotonic()
                if table.num_rows:
                    self.alarms.early(table, self.feed.settled(last, FEED_LAG), last)
                    self.handle_batch(self._frame(table), batch_id, replay)
                elif not replay:  # the writers' marks only: the position moves with the next
                    self._count_to(last)  # record (not a write per mark)
                self.progress.close(batch_id)
                # The alarms' timers due before the writers' marks fire now: every row older
                # than those was in this batch or an earlier one (`feed.Watermarks`).
                self._tick_alarms(last, idle=not table.num_rows)
                if table.num_rows:
                    self.metrics.feed_batch.observe(time.monotonic() - started)
                    self.metrics.feed_rows.inc(table.num_rows)
                after = last
        except BaseException as exc:  # the job ends with it: run_until_stopped raises it
            self._feed_error = exc
            log.exception("live feed loop failed")

    def _tick_alarms(self, last: str | None, idle: bool) -> None:
        assert self.feed is not None
        clock = self.feed.settled(last, FEED_LAG)
        self.metrics.alarm_clock.set(max(0.0, time.time() - clock))
        self.alarms.tick(clock, idle=idle)

    def _frame(self, table: pa.Table) -> DataFrame:
        """A feed batch as a DataFrame: one partition up to `FEED_ONE_TASK_ROWS` rows (one task,
        one Python worker: a second costs a batch more than it saves on so few rows)."""
        frame = self.spark.createDataFrame(table)
        return frame.coalesce(1) if table.num_rows <= FEED_ONE_TASK_ROWS else frame

    def run_until_stopped(self) -> None:
        if self.feed is not None:
            while not self._stop.is_set() and self._feed_thread is not None:
                self._feed_thread.join(0.5)
                if not self._feed_thread.is_alive():
                    break
            if self._feed_error is not None:
                raise RuntimeError(f"live rules feed failed: {self._feed_error}")
            return
        assert self.query is not None
        while not self._stop.is_set() and self.query.isActive:
            self.query.awaitTermination(0.5)
        exc = self.query.exception()
        if exc is not None:
            raise RuntimeError(f"live rules query failed: {exc}")

    def stop(self) -> None:
        self._stop.set()
        if self.query is not None and self.query.isActive:
            self.query.stop()
        if self._feed_thread is not None:
            self._feed_thread.join(30)  # the batch being evaluated finishes
        if self._preparer is not None:
            self._preparer.join(30)
        if self._recorder is not None:
            self._recorder.join(10)
        self.alarms.stop()
        # What runs finishes (a few seconds at most); what waits is kept in the durable queue.
        self.lanes.close(grace=10.0)
        self.sinks.stop()  # what waits stays in the outboxes
        self.outbox.close()
        self.record()
        self.journey.flush(force=True)
        if self.runner is not None:
            self.runner.close()
        if self.lanes.retries is not None:
            self.lanes.retries.close()
        if self._books_conn is not None:
            self._books_conn.close()
        self.rules.close()


def evaluate_batch(
    batch: DataFrame, specs: list[RuleSpec], reuse: bool = False
) -> tuple[list, Callable[[], list] | None]:
    """The batch's results collected to the driver (the side-effect-free step a retry repeats),
    and a function that collects the rest, or None. With `reuse` (the batch a plain table of
    rows, the live feed's) the rules' plan is reused and the results come as Arrow
    (`spark.rules.results`) in two phases: the natives' first, the Python pass's from the
    function (None when nothing was left to it); without, all of them at once."""
    if reuse:
        return outputs_in_phases(batch, specs, tenant_share_seconds())
    return collect_outputs(batch, specs, tenant_share_seconds()), None


def serve_metrics(metrics: LiveMetrics, port: int, host: str = "127.0.0.1") -> None:
    start_http_server(port, addr=host, registry=metrics.registry)


def wait_for_batches(job: LiveJob, count: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while job.batches < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{job.batches} batches after {timeout}s")
        time.sleep(0.1)

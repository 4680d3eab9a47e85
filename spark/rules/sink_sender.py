"""Sinks' delivery, the live job's sender (issue 47): each sink's due outputs taken from its
outbox in order (`outbox.py` put them there), handed to its writer (`common.sinks`), settled.

- One sink (rule action) is sent by one worker at a time, oldest first, at most a send's worth
  (`batch_limits`); sinks of every tenant share `workers` threads (`SINK_WORKERS`, 8), a tenant
  at most `per_tenant` of them at once (`SINK_WORKERS_PER_TENANT`, 2), and a sink is handed to a
  worker only when one is free (none waits queued behind another's send): a tenant's slow or
  silent far ends (a tarpit holds a send up to its 30 s) hold its own sinks only. An S3 sink gathers: it sends once a full object is waiting or its oldest output
  is `S3_FLUSH_SECONDS` old (one object per flush, named by its outbox ids).
- A claim names its sender (`claimed_by`, its `presence.Presence`): a sender killed mid-send
  leaves its outputs to be taken back by the next sender to look (at its start, then every
  `ORPHANS_EVERY`) and sent again — at least once, never lost, each counted as possibly resent.
  A claim is also a lease (`LEASE` seconds), the backstop for a sender alive but stuck.
- No output is claimed while an older one of its key waits (for its back-off, or out in a
  send): a key's outputs leave in their order. Delivered outputs are deleted; one the far end
  refused for now waits `backoff × 2^attempts` (up to `max_backoff`, 30 s: a far end back is
  found within that), and the same key's later outputs wait behind it (order per key kept where
  the sink has one) — the whole sink when none of the batch got through (the far end away: one
  attempt per back-off, not one per batch; its state's `paused_until`, so no waiting row is
  rewritten). Once an output has waited `retry_for` (24 h) since it was queued, however many
  attempts that took (an outage of hours loses nothing the outbox holds), or at once when the
  far end refused it for good, it is a dead letter in words, and no longer done in the action
  ledger (a `new-only` run over its range, the re-send from history, queues it again).
- Per sink, its state (`tenants_sinkstate`: ok, retrying, failing; the last error in words;
  delivered, their bytes and per clock minute (throughput), dead and resent counts — resent:
  delivered after a failed attempt the far end may have taken too, the most duplicates it can
  hold) for `GET /api/v1/sinks`; the journey has a row per output delivered or given up.
- Metering: each output was metered as an executed action when it entered its outbox; what a
  bucket (`s3`) sink took is metered again, as bytes (its outputs' JSON bytes, the
  `delivered_bytes` of its state), to the rule's tenant in the minute it was settled: `metered`
  (tenant slug, bytes), the live job's `metering.SinkBytes.add`, called from the worker that
  settled it. The other sinks' deliveries are not metered again.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from common.contracts import tables
from common.security import sealed
from common.sinks import Record, Result, SinkWriter, batch_limits, writer_for
from spark.rules import ledger
from spark.rules import store as db
from spark.rules.actions import Job, Outcome
from spark.rules.bookkeeping import INSERT_DEAD_LETTER, DeadLetter, letter_params
from spark.rules.journey import RuleJourney
from spark.rules.outbox import SINKS
from spark.rules.presence import ORPHANED, SINK_SENDERS, Presence

log = logging.getLogger("spark.rules.sinks")

LEASE = 120.0
ORPHANS_EVERY = 5.0  # seconds between looks for claims whose sender is gone
HOLD_SECONDS = 1.0  # the longest a worker drains one sink's backlog before it is handed again
S3_FLUSH_SECONDS = float(os.environ.get("SINK_S3_FLUSH_SECONDS", "5"))
RETRYING, FAILING, OK = "retrying", "failing", "ok"
FAILING_AFTER = 3  # attempts of its oldest output before a sink is said to be failing

# Each sink with outputs waiting and not paused, from its state (its `waiting` kept by whoever
# adds or takes rows), least lately settled first: never a scan of what waits — an outage of
# hours leaves millions of rows in an outbox.
_DUE = f"""
SELECT rule_id, action_index, waiting FROM {tables.SINK_STATE}
 WHERE waiting > 0 AND (paused_until IS NULL OR paused_until <= now())
 ORDER BY updated_at
"""
_OLDEST_AGE = f"""
SELECT extract(epoch FROM now() - created_at) FROM {tables.SINK_OUTBOX}
 WHERE rule_id = %s AND action_index = %s ORDER BY id LIMIT 1
"""
# A sink whose count says outputs wait and whose outbox holds none: counted again (a count off
# would have the sender look at it for ever)
_EMPTY = f"""
UPDATE {tables.SINK_STATE} SET waiting = 0, waiting_bytes = 0
 WHERE rule_id = %s AND action_index = %s AND waiting <> 0
   AND NOT EXISTS (SELECT 1 FROM {tables.SINK_OUTBOX} WHERE rule_id = %s AND action_index = %s)
"""
_RULES = f"""
SELECT r.id, r.actions, r.name, t.slug FROM {tables.RULE} r
  JOIN {tables.TENANT} t ON t.id = r.tenant_id WHERE r.id = ANY(%s)
"""
_CLAIM = f"""
WITH blocked AS MATERIALIZED (  -- each key's oldest output still waiting (or out in a send)
  SELECT key, min(id) AS first FROM {tables.SINK_OUTBOX}
   WHERE rule_id = %(rule)s AND action_index = %(index)s AND next_attempt_at > now()
   GROUP BY key)
UPDATE {tables.SINK_OUTBOX} SET next_attempt_at = now() + make_interval(secs => %(lease)s),
                                 claimed_by = %(owner)s
 WHERE id IN (SELECT o.id FROM {tables.SINK_OUTBOX} o LEFT JOIN blocked b ON b.key = o.key
               WHERE o.rule_id = %(rule)s AND o.action_index = %(index)s
                 AND o.next_attempt_at <= now() AND (b.first IS NULL OR o.id < b.first)
                 AND o.id <= COALESCE(
                       (SELECT s.batch_through FROM {tables.SINK_STATE} s
                         WHERE s.rule_id = %(rule)s AND s.action_index = %(index)s),
                       9223372036854775807)
               ORDER BY o.id LIMIT %(most)s FOR UPDATE OF o SKIP LOCKED)
RETURNING id, key, body, ts_ms, attempts, ledger_key, topic, client_id, tenant_id,
          extract(epoch FROM now() - created_at)
"""
_RELEASE = f"""
UPDATE {tables.SINK_OUTBOX} SET next_attempt_at = now(), claimed_by = NULL WHERE id = ANY(%s)
"""
# A gone sender's claims: due now, one attempt more (the far end may have taken them already).
_ORPHANS = f"""
UPDATE {tables.SINK_OUTBOX} SET next_attempt_at = now(), claimed_by = NULL,
       attempts = attempts + 1, last_error = %(why)s
 WHERE {ORPHANED}
"""
ORPHANED_WHY = "the sender sending it stopped mid-send (its process ended); sent again"
_DELETE = f"DELETE FROM {tables.SINK_OUTBOX} WHERE id = ANY(%s)"
_RETRY = f"""
UPDATE {tables.SINK_OUTBOX} SET attempts = attempts + 1, last_error = %s, claimed_by = NULL,
       next_attempt_at = now() + make_interval(secs => %s) WHERE id = %s
"""
_BEHIND = f"""
UPDATE {tables.SINK_OUTBOX} SET next_attempt_at = GREATEST(next_attempt_at,
       now() + make_interval(secs => %s))
 WHERE rule_id = %s AND action_index = %s AND key = %s AND id > %s
"""
_OLDEST_TRIES = f"""
SELECT attempts FROM {tables.SINK_OUTBOX} WHERE rule_id = %s AND action_index = %s
 ORDER BY id LIMIT 1
"""
_STATE = f"""
INSERT INTO {tables.SINK_STATE} (tenant_id, rule_id, action_index, state, last_error,
                                 last_error_at, last_ok_at, delivered, dead, resent, lag_ms,
                                 delivered_bytes, minute_at, minute_delivered, paused_until,
                                 batch_through, updated_at)
VALUES (%(tenant_id)s, %(rule_id)s, %(index)s, %(state)s, %(error)s, %(error_at)s, %(ok_at)s,
        %(delivered)s, %(dead)s, %(resent)s, %(lag_ms)s, %(bytes)s, date_trunc('minute', now()),
        %(delivered)s, now() + make_interval(secs => %(pause)s::float8), %(through)s, now())
ON CONFLICT (rule_id, action_index) DO UPDATE SET
  state = EXCLUDED.state,
  last_error = CASE WHEN EXCLUDED.last_error <> '' THEN EXCLUDED.last_error
                    ELSE {tables.SINK_STATE}.last_error END,
  last_error_at = COALESCE(EXCLUDED.last_error_at, {tables.SINK_STATE}.last_error_at),
  last_ok_at = COALESCE(EXCLUDED.last_ok_at, {tables.SINK_STATE}.last_ok_at),
  delivered = {tables.SINK_STATE}.delivered + EXCLUDED.delivered,
  dead = {tables.SINK_STATE}.dead + EXCLUDED.dead,
  resent = {tables.SINK_STATE}.resent + EXCLUDED.resent,
  lag_ms = COALESCE(EXCLUDED.lag_ms, {tables.SINK_STATE}.lag_ms),
  delivered_bytes = {tables.SINK_STATE}.delivered_bytes + EXCLUDED.delivered_bytes,
  -- this clock minute's deliveries so far and the last minute's (throughput), rolled over here
  previous_minute_delivered = CASE
    WHEN {tables.SINK_STATE}.minute_at = EXCLUDED.minute_at
      THEN {tables.SINK_STATE}.previous_minute_delivered
    WHEN {tables.SINK_STATE}.minute_at = EXCLUDED.minute_at - interval '1 minute'
      THEN {tables.SINK_STATE}.minute_delivered
    ELSE 0 END,
  minute_delivered = CASE WHEN {tables.SINK_STATE}.minute_at = EXCLUDED.minute_at
    THEN {tables.SINK_STATE}.minute_delivered + EXCLUDED.minute_delivered
    ELSE EXCLUDED.minute_delivered END,
  minute_at = EXCLUDED.minute_at, paused_until = EXCLUDED.paused_until,
  batch_through = EXCLUDED.batch_through,
  waiting = GREATEST(0, {tables.SINK_STATE}.waiting - %(gone)s),
  waiting_bytes = GREATEST(0, {tables.SINK_STATE}.waiting_bytes - %(gone_bytes)s),
  updated_at = now()
"""


@dataclass(frozen=True)
class Sink:
    rule_id: int
    index: int


@dataclass
class _Claimed:
    records: list[Record]
    # outbox id -> (attempts, ledger_key, topic, client_id, seconds since it was queued)
    rows: dict[int, tuple[Any, ...]]
    tenant_id: int


class SinkSender:
    """The sender thread and its workers (see the module)."""

    def __init__(
        self,
        dsn: str,
        journey: RuleJourney | None = None,
        *,
        workers: int = int(os.environ.get("SINK_WORKERS", "8")),
        per_tenant: int = int(os.environ.get("SINK_WORKERS_PER_TENANT", "2")),
        poll: float = 0.2,
        retry_for: float = float(os.environ.get("SINK_RETRY_SECONDS", "86400")),
        backoff: float = 1.0,
        max_backoff: float = float(os.environ.get("SINK_MAX_BACKOFF", "30")),
        metered: Callable[[str, int], None] | None = None,
    ) -> None:
        self.dsn, self.journey = dsn, journey
        # (tenant slug, JSON bytes) of what a bucket sink took, once settled (see the module)
        self.metered = metered
        self.poll, self.retry_for = poll, retry_for
        self.backoff, self.max_backoff = backoff, max_backoff
        self.workers, self.per_tenant = max(1, workers), max(1, per_tenant)
        self.pool = ThreadPoolExecutor(self.workers, thread_name_prefix="sink")
        self._busy: set[Sink] = set()
        self._tenant_busy: Counter[str] = Counter()  # sends in flight per tenant
        self._starved = False  # a round left a due sink for want of a worker
        self._busy_lock = threading.Lock()
        self._writers: dict[Sink, tuple[str, SinkWriter]] = {}
        self._writers_lock = threading.Lock()
        self._local = threading.local()
        self._conns: list[psycopg.Connection[Any]] = []  # every thread's, closed at stop
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.presence = Presence(dsn, SINK_SENDERS)
        self.delivered = self.dead = 0

    # -- the sender thread ----------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sink-sender", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Outputs were appended: look now, not at the next poll."""
        self._wake.set()

    def _run(self) -> None:
        looked = float("-inf")
        while not self._stop.is_set():
            try:
                if time.monotonic() - looked >= ORPHANS_EVERY:
                    self.take_back_orphans()
                    looked = time.monotonic()
                self.round()
            except Exception:
                log.exception("sinks: a round failed (tried again)")
                self._drop_connection()
            self._wake.wait(self.poll)
            self._wake.clear()

    def take_back_orphans(self) -> int:
        """Make due again the claims of senders whose process ended; how many."""
        self.presence.hold(check=True)
        cursor = self._connection().execute(
            _ORPHANS, {**self.presence.params(), "why": ORPHANED_WHY}
        )
        if cursor.rowcount:
            log.warning(
                "sinks: %d outputs claimed by a sender now gone sent again", cursor.rowcount
            )
        return cursor.rowcount

    def round(self) -> int:
        """Hand each due sink not being sent to a free worker, oldest output first, a tenant
        never more than `per_tenant` at once; how many were handed."""
        conn = self._connection()
        due = conn.execute(_DUE).fetchall()
        if not due:
            return 0
        rules = {r[0]: r for r in conn.execute(_RULES, ([d[0] for d in due],)).fetchall()}
        handed = 0
        for rule_id, index, waiting in due:
            sink = Sink(rule_id, index)
            rule = rules.get(rule_id)
            action = _action_of(rule, index)
            if action is not None and action.get("type") == "s3":
                most, _ = batch_limits(action)
                if waiting < most:
                    oldest = conn.execute(_OLDEST_AGE, (rule_id, index)).fetchone()
                    if oldest is not None and float(oldest[0]) < S3_FLUSH_SECONDS:
                        continue  # gathering into one object
            tenant = rule[3] if rule is not None else ""
            with self._busy_lock:
                if len(self._busy) >= self.workers:
                    self._starved = True
                    break  # every worker sending: the rest when one is free
                if sink in self._busy:
                    continue
                if self._tenant_busy[tenant] >= self.per_tenant:
                    self._starved = True
                    continue
                self._busy.add(sink)
                self._tenant_busy[tenant] += 1
            self.pool.submit(self._deliver_guarded, sink, rule, tenant)
            handed += 1
        return handed

    # -- a worker -------------------------------------------------------------------------------

    def _deliver_guarded(self, sink: Sink, rule: tuple[Any, ...] | None, tenant: str) -> None:
        """Deliver the sink's due outputs; while each send is a full batch (a backlog draining),
        the next at once, for up to `HOLD_SECONDS`, then the worker is given back."""
        try:
            action = _action_of(rule, sink.index)
            most = batch_limits(action)[0] if action is not None and not _problem(action) else 0
            until = time.monotonic() + HOLD_SECONDS
            while self.deliver(sink, rule) >= most > 0 and time.monotonic() < until:
                if self._stop.is_set():
                    break
        except Exception:
            log.exception(
                "sinks: rule %s action %s not sent (tried again)", sink.rule_id, sink.index
            )
            self._drop_connection()
        finally:
            with self._busy_lock:
                self._busy.discard(sink)
                self._tenant_busy[tenant] -= 1
                starved, self._starved = self._starved, False
            if starved:
                self._wake.set()  # a sink waited for a worker: a round now, not at the poll

    def deliver(self, sink: Sink, rule: tuple[Any, ...] | None) -> int:
        """Send one batch of the sink's due outputs and settle it; returns how many the far end
        took."""
        conn = self._connection()
        action = _action_of(rule, sink.index)
        words = _problem(action)
        most, most_bytes = batch_limits(action) if words is None and action else (500, 1 << 20)
        claimed = self._claim(conn, sink, most, most_bytes)
        if not claimed.records:
            conn.execute(_EMPTY, (sink.rule_id, sink.index, sink.rule_id, sink.index))
            return 0
        writer = None
        if words is None and action is not None and rule is not None:
            try:
                writer = self._writer(sink, action, rule[3])
            except ValueError as exc:
                words = str(exc)
        if writer is None:
            results = [Result(False, words or "the sink's action is gone", False)] * len(
                claimed.records
            )
        else:
            results = writer.send(claimed.records)
        self._settle(conn, sink, rule, action or {}, claimed, results)
        return sum(1 for result in results if result.ok)

    def _claim(self, conn: psycopg.Connection[Any], sink: Sink, most: int, most_bytes: int):
        self.presence.hold()
        claim = {"lease": LEASE, "owner": self.presence.id, "rule": sink.rule_id,
                 "index": sink.index, "most": most}  # fmt: skip
        rows = sorted(
            conn.execute(_CLAIM, claim).fetchall(),
            key=lambda r: r[0],
        )
        records: list[Record] = []
        kept: dict[int, tuple[Any, ...]] = {}
        size, over = 0, []
        for outbox_id, key, body, ts_ms, attempts, ledger_key, topic, client_id, _, age in rows:
            size += len(body.encode())
            if records and size > most_bytes:
                over.append(outbox_id)  # the next send's
                continue
            try:
                output = json.loads(body)
            except ValueError:
                output = {"value": body}
            if not isinstance(output, dict):
                output = {"value": output}
            records.append(Record(outbox_id, key, body, ts_ms, output))
            kept[outbox_id] = (attempts, ledger_key, topic, client_id, float(age))
        if over:
            conn.execute(_RELEASE, (over,))
        return _Claimed(records, kept, rows[0][8] if rows else 0)

    def _settle(
        self,
        conn: psycopg.Connection[Any],
        sink: Sink,
        rule: tuple[Any, ...] | None,
        action: dict[str, Any],
        claimed: _Claimed,
        results: Sequence[Result],
    ) -> None:
        done, dead, waiting = [], [], []
        for record, result in zip(claimed.records, results, strict=True):
            attempts, age = claimed.rows[record.id][0] + 1, claimed.rows[record.id][4]
            if result.ok:
                done.append(record)
            elif not result.retry:
                dead.append((record, result.error or "refused", attempts))
            elif age >= self.retry_for:
                words = (
                    f"not delivered in {_span(self.retry_for)} of retrying ({attempts} attempts)"
                )
                dead.append((record, f"{words}: {result.error or 'not sent'}", attempts))
            else:
                waiting.append((record, result.error or "not sent", attempts))
        now = datetime.now(UTC)
        tenant = rule[3] if rule is not None else ""
        letters = [
            DeadLetter(
                sink.rule_id,
                tenant,
                action,
                r.output,
                error,
                attempts,
                r.body,
                key=claimed.rows[r.id][1],
            )  # fmt: skip
            for r, error, attempts in dead
        ]
        error = (waiting or dead or [(None, "", 0)])[-1][1]
        delivered_bytes = sum(len(r.body.encode()) for r in done)
        with conn.transaction(), conn.cursor() as cur:
            gone = [r.id for r in done] + [r.id for r, _, _ in dead]
            if gone:
                cur.execute(_DELETE, (gone,))
            if letters:
                cur.executemany(INSERT_DEAD_LETTER, [letter_params(x, now) for x in letters])
                # Not done after all: a `new-only` run over their range queues them again.
                given_up = [ledger.ActionKey.decode(sink.rule_id, x.key) for x in letters]
                ledger.forget(conn, [k for k in given_up if k is not None])
            held: dict[str, tuple[int, float]] = {}
            for record, why, attempts in waiting:
                delay = min(self.max_backoff, self.backoff * 2 ** (attempts - 1))
                cur.execute(_RETRY, (why[:2000], delay, record.id))
                held.setdefault(record.key, (record.id, delay))
            pause = through = None
            if waiting and not done and not dead:  # the far end away: the whole sink waits,
                pause = max(d for _, d in held.values())  # in its state (no row rewritten),
                # and its next attempt is this same batch (an HTTP batch's id kept: the far end
                # may have taken it and lost only its answer)
                through = max(r.id for r, _, _ in waiting)
            else:
                for key, (first, delay) in held.items():  # its later outputs wait behind it
                    cur.execute(_BEHIND, (delay, sink.rule_id, sink.index, key, first))
            # Its state from what still waits, not this batch alone: ok once its oldest output
            # has no failed attempt; failing once it has failed FAILING_AFTER times.
            oldest = cur.execute(_OLDEST_TRIES, (sink.rule_id, sink.index)).fetchone()
            tries = oldest[0] if oldest else 0
            state = OK if not tries else FAILING if tries >= FAILING_AFTER else RETRYING
            cur.execute(
                _STATE,
                {
                    "tenant_id": claimed.tenant_id, "rule_id": sink.rule_id, "index": sink.index,
                    "state": state, "error": (error or "")[:2000],
                    "error_at": now if error else None, "ok_at": now if done else None,
                    "delivered": len(done), "dead": len(dead),
                    "resent": sum(1 for r in done if claimed.rows[r.id][0] > 0),
                    "bytes": delivered_bytes, "pause": pause, "through": through,
                    "gone": len(done) + len(dead),
                    "gone_bytes": sum(len(r.body.encode()) for r in done)
                    + sum(len(r.body.encode()) for r, _, _ in dead),
                    "lag_ms": int(now.timestamp() * 1000) - min(r.ts_ms for r in done)
                    if done else None,
                },
            )  # fmt: skip
        self.delivered += len(done)
        self.dead += len(dead)
        if self.metered is not None and done and tenant and action.get("type") == "s3":
            self.metered(tenant, delivered_bytes)
        if self.journey is not None:
            self._journey(sink, rule, action, claimed, done, dead)

    def _journey(self, sink, rule, action, claimed, done, dead) -> None:
        name = rule[2] if rule is not None else None
        tenant = rule[3] if rule is not None else ""
        now_ms = int(time.time() * 1000)
        outcomes = []
        for record, ok, error in [(r, True, "") for r in done] + [
            (r, False, e) for r, e, _ in dead
        ]:
            _, _, topic, client_id, _ = claimed.rows[record.id]
            job = Job(sink.rule_id, tenant, "", action, record.output, record.ts_ms,
                      topic=topic or None, client_id=client_id or None, rule_name=name,
                      action_index=sink.index)  # fmt: skip
            outcomes.append(Outcome(job, ok, error, done_ms=now_ms, dead=not ok))
        self.journey.sinks(outcomes)

    # -- writers and connections ----------------------------------------------------------------

    def _writer(self, sink: Sink, action: dict[str, Any], tenant: str) -> SinkWriter:
        """The sink's writer, kept while its action stays the same (a bridge's connection)."""
        fingerprint = json.dumps(action, sort_keys=True, default=str)
        with self._writers_lock:
            kept = self._writers.get(sink)
            if kept is not None and kept[0] == fingerprint:
                return kept[1]
            if kept is not None:
                kept[1].close()
            writer = writer_for(action, tenant)
            self._writers[sink] = (fingerprint, writer)
            return writer

    def _connection(self) -> psycopg.Connection[Any]:
        conn = getattr(self._local, "conn", None)
        if conn is None or conn.closed:
            conn = self._local.conn = db.connect(self.dsn)
            # Plans for the values at hand, never a generic one: one sink's outbox may hold a
            # million rows and the next none, and a plan good for one scans the other's
            conn.prepare_threshold = None
            with self._busy_lock:
                self._conns = [c for c in self._conns if not c.closed] + [conn]
        return conn

    def _drop_connection(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def stop(self, grace: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(grace)
        self.pool.shutdown(wait=True, cancel_futures=True)
        with self._writers_lock:
            for _, writer in self._writers.values():
                writer.close()
            self._writers.clear()
        with self._busy_lock:
            for conn in self._conns:
                conn.close()
            self._conns.clear()
        self.presence.close()


def _span(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:g} h"
    return f"{seconds / 60:g} min" if seconds >= 60 else f"{seconds:g} s"


def _action_of(rule: tuple[Any, ...] | None, index: int) -> dict[str, Any] | None:
    """The rule's action at `index`, its secrets opened; None when it is gone."""
    if rule is None:
        return None
    actions = rule[1] if isinstance(rule[1], list) else json.loads(rule[1] or "[]")
    if not 0 <= index < len(actions) or not isinstance(actions[index], dict):
        return None
    [opened] = sealed.open_actions([actions[index]])
    return opened if isinstance(opened, dict) else None


def _problem(action: dict[str, Any] | None) -> str | None:
    """Why the outputs waiting for this action cannot be sent by it, in words; None if they can."""
    if action is None:
        return "the rule or this action was deleted before its outputs were sent"
    if action.get("type") not in SINKS:
        return f"the rule's action changed to {action.get('type')!r} before its outputs were sent"
    if any(sealed.is_sealed(action.get(f)) for f in sealed.SEALED_FIELDS):
        return "the sink's credentials are sealed under a key this job does not have (SEALING_KEY)"
    return None

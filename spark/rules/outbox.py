"""Sinks' durable outboxes, the rules' side (issue 47): an output for an S3, SQS, Kinesis,
PostgreSQL, MQTT-bridge or HTTP-batch action is done, as far as its rule goes, once it is in its
sink's outbox (`tenants_sinkoutbox`, one queue per rule action): the action ledger, counters and
metering take it from there, and the sink sender (`sink_sender.py`) delivers it, retrying while
the far end is away. Nothing a rule produced waits only in memory for a sink.

Bounded per sink by the tenant's `max_sink_outbox_messages` and `max_sink_outbox_bytes`,
checked against the sink's state's `waiting` and `waiting_bytes` (kept by whoever adds or takes
rows, in the same transaction, so no append counts the rows: an outage can leave millions;
the state rows are locked in one order, so appends never deadlock): an output over
them is not dropped silently — it becomes a dead letter saying so (replayable from
the rule's page) and is counted (`quota_sink_outbox`). One transaction per append, with the
outputs' keys in the action ledger: a restart that reads a batch again (or a `new-only` run over
history) finds them done and appends none twice, even once the sink has them.

An append carries several tenants' outputs, so no tenant's value may fail it: the body is JSON
text with every non-ASCII character escaped, and the key, topic and client id are made storable
(`storable_text`: NUL and lone surrogates escaped). When the database still refuses the batch
for a value, each output is appended alone and only the one refused alone fails (a dead letter
saying so); an append that fails for the database being away raises, and the lanes retry it
like any action.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from common.contracts import tables
from common.sinks import SINK_TYPES
from common.stores.postgres_text import storable_text
from common.webhooks.delivery import output_json
from spark.rules import ledger
from spark.rules import store as db
from spark.rules.actions import Job, Outcome
from spark.rules.refusals import count_refused

log = logging.getLogger("spark.rules.outbox")

SINKS = frozenset(SINK_TYPES)


def _quota(key: str) -> str:
    return (
        f"COALESCE(CASE WHEN jsonb_typeof(t.quota_overrides -> '{key}') = 'number' "
        f"THEN (t.quota_overrides ->> '{key}')::numeric::bigint END, p.{key})"
    )


_LIMITS = f"""
SELECT t.slug, t.id, {_quota("max_sink_outbox_messages")}, {_quota("max_sink_outbox_bytes")}
  FROM {tables.TENANT} t JOIN {tables.PLAN} p ON p.id = t.plan_id WHERE t.slug = ANY(%s)
"""
# Each sink of the append: its state row (made by its first append), locked while it is added to
_ENSURE = f"""
INSERT INTO {tables.SINK_STATE} (tenant_id, rule_id, action_index) VALUES (%s, %s, %s)
ON CONFLICT (rule_id, action_index) DO NOTHING
"""
_WAITING = f"""
SELECT rule_id, action_index, waiting, waiting_bytes FROM {tables.SINK_STATE}
 WHERE (rule_id, action_index) IN (SELECT * FROM unnest(%s::bigint[], %s::int[]))
 ORDER BY rule_id, action_index FOR UPDATE
"""
_ADDED = f"""
UPDATE {tables.SINK_STATE} SET waiting = waiting + %s, waiting_bytes = waiting_bytes + %s
 WHERE rule_id = %s AND action_index = %s
"""


_DEAD = f"""
INSERT INTO {tables.SINK_STATE} (tenant_id, rule_id, action_index, dead, last_error,
                                 last_error_at, updated_at)
VALUES (%s, %s, %s, %s, %s, now(), now())
ON CONFLICT (rule_id, action_index) DO UPDATE SET
  dead = {tables.SINK_STATE}.dead + EXCLUDED.dead, last_error = EXCLUDED.last_error,
  last_error_at = EXCLUDED.last_error_at, updated_at = now()
"""
_INSERT = f"""
INSERT INTO {tables.SINK_OUTBOX}
    (tenant_id, rule_id, action_index, key, body, ts_ms, ledger_key, topic, client_id)
SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM {tables.RULE} WHERE id = %s)
"""


def full_words(most: int, most_bytes: int) -> str:
    return (
        f"the sink's outbox is full (it keeps {most:,} outputs or {most_bytes:,} bytes: "
        "max_sink_outbox_messages, max_sink_outbox_bytes) while the sink is away or slow"
    )


class SinkOutbox:
    """Appends sink outputs (thread-safe: the lanes call it from worker threads)."""

    def __init__(self, dsn: str, source: str = ledger.LIVE, run_id: str | None = None) -> None:
        self.dsn = dsn
        self.source, self.run_id = source, run_id  # as the ledger records who did the actions
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()
        self.appended = 0
        self.on_append: Callable[[], None] | None = None  # the sender, woken

    def append(self, jobs: Sequence[Job]) -> list[Outcome]:
        """Each job's outcome: in its outbox (ok), or a dead letter when the outbox is full;
        raises when the database is away (nothing written: the caller tries again)."""
        if not jobs:
            return []
        with self._lock:
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = db.connect(self.dsn)
                try:
                    return self._append(self._conn, jobs)
                except (psycopg.DataError, psycopg.IntegrityError) as exc:
                    if len(jobs) == 1:
                        raise
                    log.warning("a sink append of %d refused (%s): each alone", len(jobs), exc)
                    return [o for job in jobs for o in self._append_alone(self._conn, job)]
            except Exception:
                if self._conn is not None:
                    self._conn.close()
                self._conn = None
                raise

    def _append_alone(self, conn: psycopg.Connection[Any], job: Job) -> list[Outcome]:
        try:
            return self._append(conn, [job])
        except (psycopg.DataError, psycopg.IntegrityError) as exc:
            words = f"the platform's database refused this output for its outbox ({exc.sqlstate})"
            return [Outcome(job, False, words, dead=True)]

    def _append(self, conn: psycopg.Connection[Any], jobs: Sequence[Job]) -> list[Outcome]:
        outcomes: list[Outcome] = []
        refused: Counter[str] = Counter()
        full: dict[tuple[int, int, int], list[Any]] = {}  # (tenant, rule, action): [n, words]
        with conn.transaction(), conn.cursor() as cur:
            limits = {
                slug: (tenant_id, int(most), int(most_bytes))
                for slug, tenant_id, most, most_bytes in cur.execute(
                    _LIMITS, (sorted({j.tenant for j in jobs}),)
                ).fetchall()
            }
            sinks = sorted(
                {(limits[j.tenant][0], j.rule_id, j.action_index) for j in jobs
                 if j.tenant in limits and j.action_index is not None},
                key=lambda sink: sink[1:],
            )  # fmt: skip
            cur.executemany(_ENSURE, sinks)
            rules, indexes = [s[1] for s in sinks], [s[2] for s in sinks]
            depth = {
                (rule_id, index): [int(n), int(size)]
                for rule_id, index, n, size in cur.execute(_WAITING, (rules, indexes)).fetchall()
            }
            before = {sink: list(held) for sink, held in depth.items()}
            rows = []
            for job in jobs:
                limit = limits.get(job.tenant)
                if limit is None or job.action_index is None:
                    outcomes.append(Outcome(job, False, "the rule's tenant or action is gone"))
                    continue
                tenant_id, most, most_bytes = limit
                body = output_json(job.output)
                size = len(body.encode())
                held = depth.setdefault((job.rule_id, job.action_index), [0, 0])
                if held[0] + 1 > most or held[1] + size > most_bytes:
                    words = full_words(most, most_bytes)
                    outcomes.append(Outcome(job, False, words, dead=True))
                    refused[job.tenant] += 1
                    full.setdefault((tenant_id, job.rule_id, job.action_index), [0, words])[0] += 1
                    continue
                held[0] += 1
                held[1] += size
                rows.append(
                    (
                        tenant_id, job.rule_id, job.action_index, storable_text(job.client_id or ""),
                        body, job.ts_ms, job.key.encode() if job.key is not None else "",
                        storable_text(job.topic or ""), storable_text(job.client_id or ""),
                        job.rule_id,
                    )
                )  # fmt: skip
                outcomes.append(Outcome(job, True))
            if rows:
                cur.executemany(_INSERT, rows)
                cur.executemany(
                    _ADDED,
                    [(held[0] - before[sink][0], held[1] - before[sink][1], *sink)
                     for sink, held in depth.items() if held != before[sink]],
                )  # fmt: skip
                done = [o.job.key for o in outcomes if o.ok and o.job.key is not None]
                ledger.record(conn, done, self.source, self.run_id)
            if refused:
                count_refused(cur, "quota_sink_outbox", refused)
            for (tenant_id, rule_id, index), (n, words) in full.items():  # the sink's `dead`
                cur.execute(_DEAD, (tenant_id, rule_id, index, n, words))
        self.appended += len(rows)
        if rows and self.on_append is not None:
            self.on_append()
        return outcomes

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
            self._conn = None

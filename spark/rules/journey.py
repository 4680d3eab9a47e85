"""The live rules job's rows in the journey (`common.journey.schema`, stream `messages`): what
each tenant's rules did with a message, beside what the broker did with it.

- `rule_matched`: the rule's WHERE held for the message (its outputs go to the actions);
- `rule_failed`: evaluating the rule failed on it (the error, or the budget it went over);
- `rule_action_ok` / `rule_action_failed`: one action of one output finished (after its retries;
  a failure is kept as a dead letter), `reason` saying which action and, failed, the error;
- `alarm_changed`: an alarm's key changed state on the message (`rule` is `alarm {name}`,
  `reason` the key and the change); a change its timer made later is on the alarm's history.

Rows name the message's topic and publisher and the rule (`rule`), carry the time they happened
(a match when the batch was evaluated, an action when it finished), and are written like the
broker's: a live segment every `interval` seconds, all tenants in one file sorted by tenant, read
and compacted by the same code. Written on the job's bookkeeping thread; a store that is away keeps
rows up to `max_rows`, then drops the oldest (logged): the journey must never stop the rules.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from common.journey.files import encode_segment, rows_table
from common.journey.schema import (
    ALARM_CHANGED,
    MESSAGE_SCHEMA,
    MESSAGES,
    RULE_ACTION_FAILED,
    RULE_ACTION_OK,
    RULE_FAILED,
    RULE_MATCHED,
    live_segment_key,
)
from common.stores.object_store import ObjectStore
from spark.rules.actions import Outcome
from spark.rules.outbox import SINKS

log = logging.getLogger("spark.rules.journey")

PASSED, FAILED = "passed", "failed"  # the plan's statuses (`spark.rules.plan`)


def action_words(action: Mapping[str, Any]) -> str:
    """An action as a tenant recognises it, without anything secret (a webhook's host only:
    its path or query may carry a token)."""
    kind = str(action.get("type") or "action")
    if kind == "webhook":
        return f"webhook to {urlsplit(str(action.get('url') or '')).hostname or '?'}"
    if kind == "republish":
        return f"republish to {action.get('topic')}"
    if kind == "dataset":
        return f"dataset {action.get('name')}"
    where = {
        "s3": ("bucket", action.get("bucket")),
        "sqs": ("queue", str(action.get("queue_url") or "").rstrip("/").rsplit("/", 1)[-1]),
        "kinesis": ("stream", action.get("stream")),
        "postgres": ("table", action.get("table")),
        "mqtt_bridge": ("broker", action.get("host")),
        "http_batch": ("", urlsplit(str(action.get("url") or "")).hostname or "?"),
    }.get(kind)
    if where is not None:
        label, name = where
        return f"{kind} to {label} {name}" if label else f"{kind} to {name}"
    return kind


class RuleJourney:
    def __init__(
        self,
        store: ObjectStore,
        *,
        interval: float = 2.0,
        max_rows: int = 500_000,
        writer_id: str | None = None,
    ) -> None:
        self.store = store
        self.interval = interval
        self.max_rows = max_rows
        self.writer_id = writer_id or f"rules-{socket.gethostname()}-{os.getpid()}"
        self.node = f"rules@{socket.gethostname()}"
        self._rows: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._sequence = 0
        self._last = time.monotonic()
        self.written = 0  # rows
        self.dropped = 0

    def results(self, rows: Iterable[Any], names: Mapping[int, str]) -> None:
        """A batch's evaluated results (RESULT_SCHEMA rows): matches and failures."""
        now_ms = int(time.time() * 1000)
        found = []
        for row in rows:
            if row.status == PASSED:
                outcome, reason = RULE_MATCHED, None
            elif row.status == FAILED:
                outcome, reason = RULE_FAILED, row.error
            else:
                continue  # WHERE did not hold: nothing happened to the message
            found.append(self._row(row.tenant, now_ms, row.topic, row.client_id, outcome))
            latency = now_ms - int(row.ts.timestamp() * 1000) if row.ts is not None else None
            found[-1].update(reason=reason, rule=names.get(row.rule_id), latency_ms=latency)
        self._add(found)

    def alarms(self, changes: Iterable[tuple[Any, str, Any]]) -> None:
        """Alarm transitions a message made (its result row, the alarm's name, the
        `common.alarms.machine.Transition`): `reason` says the key and the change."""
        now_ms = int(time.time() * 1000)
        found = []
        for row, name, t in changes:
            found.append(self._row(row.tenant, now_ms, row.topic, row.client_id, ALARM_CHANGED))
            latency = now_ms - int(row.ts.timestamp() * 1000) if row.ts is not None else None
            reason = f"{t.key}: {t.before} → {t.after} ({t.event})"
            found[-1].update(reason=reason, rule=f"alarm {name}", latency_ms=latency)
        self._add(found)

    def actions(self, outcomes: Iterable[Outcome], names: Mapping[int, str]) -> None:
        """Finished actions, each named by the rule that made it (`names`: the rules loaded now,
        for jobs restored from the retry queue, which do not carry it)."""
        found = []
        for outcome in outcomes:
            job = outcome.job
            words = action_words(job.action)
            if outcome.ok:
                kind, reason = RULE_ACTION_OK, words
                if job.action.get("type") in SINKS:
                    reason += ": in its outbox (delivered apart)"
            else:
                kind, reason = RULE_ACTION_FAILED, f"{words}: {outcome.error}"
                if outcome.dead:
                    reason += " (kept as a dead letter: replay it from the rule's page)"
            done_ms = outcome.done_ms or int(time.time() * 1000)
            row = self._row(job.tenant, done_ms, job.topic, job.client_id, kind)
            row.update(
                reason=reason,
                rule=job.rule_name or names.get(job.rule_id),
                latency_ms=done_ms - job.ts_ms if job.ts_ms else None,
            )
            found.append(row)
        self._add(found)

    def sinks(self, outcomes: Iterable[Outcome]) -> None:
        """Sink outputs the sender delivered or gave up on (`sink_sender.py`)."""
        found = []
        for outcome in outcomes:
            job = outcome.job
            words = action_words(job.action)
            if outcome.ok:
                kind, reason = RULE_ACTION_OK, f"{words}: delivered"
            else:
                kind = RULE_ACTION_FAILED
                reason = f"{words}: {outcome.error} (kept as a dead letter: replay it from the rule's page)"
            row = self._row(job.tenant, outcome.done_ms, job.topic, job.client_id, kind)
            row.update(reason=reason, rule=job.rule_name, latency_ms=outcome.done_ms - job.ts_ms)
            found.append(row)
        self._add(found)

    def _row(self, tenant: str, ts_ms: int, topic: Any, client_id: Any, outcome: str) -> dict:
        return {
            "tenant": tenant,
            "ts": ts_ms,
            "topic": topic,
            "client_id": client_id,
            "outcome": outcome,
            "node": self.node,
        }

    def _add(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        with self._lock:
            self._rows.extend(rows)
            over = len(self._rows) - self.max_rows
            if over > 0:
                del self._rows[:over]
                self.dropped += over
                log.error("journey: %d rule rows dropped (the object store is away)", over)

    def flush(self, force: bool = False) -> None:
        """Write what was gathered as one live segment, every `interval` seconds (or now)."""
        with self._lock:
            if not self._rows or (not force and time.monotonic() - self._last < self.interval):
                return
            rows, self._rows = self._rows, []
            self._last = time.monotonic()
            self._sequence += 1
            sequence = self._sequence
        rows.sort(key=lambda r: (r["tenant"], r["ts"]))
        # Every tenant's rows in one segment: an error quoting a tenant's value must not cost
        # the others theirs (ts: milliseconds).
        table = rows_table(rows, MESSAGE_SCHEMA, "rule_journey")
        if not table.num_rows:
            return
        key = live_segment_key(MESSAGES, min(r["ts"] for r in rows), self.writer_id, sequence)
        try:
            self.store.put(key, encode_segment(table))
        except Exception:
            log.warning("journey: rule rows not written (kept for the next try)", exc_info=True)
            self._add(rows)
            return
        self.written += len(rows)

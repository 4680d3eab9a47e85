"""The ledger of rule actions done (`tenants_ruleactionledger`): what makes a `new-only` run over
history fire no action twice for one message, whether the live job did it or an earlier run.

An action is keyed by (rule, rule version, message id, output, action): the message id is the
archive's stable id (`common.archive.schema`, "Message ids"), `output` the output's position
among the message's outputs (FOREACH gives several), `action` the action's position among the
rule's. A row is *fired* (the action was done) or a run's *claim* (`fired` false, `run_id` the
run): taken before the action runs, confirmed once it ran. Writers:

- the live job records each action that succeeded (`Ledger.record`, in batches, kept for the
  next flush while the database is away);
- a run over history with `actions: new-only` *claims* its actions before running them
  (`claim`: one INSERT … ON CONFLICT DO NOTHING RETURNING, so two runs never both take one),
  skips those already held (fired or claimed), then *confirms* (`confirm`) those that succeeded
  and releases (`release`) the claims of actions that failed, so a later run tries them again;
  a run with `actions: all` records what succeeded, as the live job does;
- a dead-letter replay records what it delivered (the control plane, through the ORM);
- a sink's output is recorded when it is in the sink's outbox (`outbox.py`); the sink sender
  forgets it (`forget`) when it gives up on it (a dead letter), so a `new-only` run over its
  range (the re-send from history) queues it again.

A run whose worker dies between claiming and confirming (kill -9, out of memory, a Celery
worker lost) leaves claims that would hide actions never fired: the control plane deletes the
unconfirmed claims of every run that ended, failed or went stale
(`tenants.rules.runs.services.runs_reclaim`), so a later `new-only` run fires them. An action
that had fired but was not confirmed yet fires once more then: at least once, never zero times.
Recording what fired (`record`, `confirm`) turns a claim into a fired row, whoever holds it.

An action that failed is not "done": it is a dead letter, replayable, and a later `new-only`
run may fire it again. The live job records after the fact, so a run over the last seconds may
meet an action the live job is still running: a run's range should end before the live job's
lag (the API's `to` defaults to a minute ago; see docs/reference/rules-api.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import psycopg

from common.contracts import tables

log = logging.getLogger("spark.rules.ledger")

LIVE, RUN, REPLAY = "live", "run", "replay"
_MAX_PENDING = 1_000_000  # keys the live job keeps while the database is away


@dataclass(frozen=True)
class ActionKey:
    rule_id: int
    version: int
    message_id: str
    output: int
    action: int
    ts_ms: int = 0  # the message's time (kept for pruning; not part of the key)

    def encode(self) -> str:
        """The key without its rule, as dead letters and the retry queue keep it (the message
        id last: it may hold any character)."""
        return f"{self.version}|{self.output}|{self.action}|{self.ts_ms}|{self.message_id}"

    @classmethod
    def decode(cls, rule_id: int, text: str | None) -> ActionKey | None:
        if not text:
            return None
        try:
            version, output, action, ts_ms, message_id = text.split("|", 4)
            return cls(rule_id, int(version), message_id, int(output), int(action), int(ts_ms))
        except ValueError:
            return None


_COLUMNS = (
    "(rule_id, version, message_id, output, action, message_ts, source, done_at, fired, run_id)"
)
# Rows of rules deleted meanwhile are dropped (the JOIN), never an error for the whole batch.
_INSERT = f"""
INSERT INTO {tables.RULE_ACTION_LEDGER} {_COLUMNS}
SELECT k.rule_id, k.version, k.message_id, k.output, k.action, k.message_ts, %(source)s, %(now)s,
       %(fired)s, %(run)s::uuid
FROM unnest(%(rule_id)s::bigint[], %(version)s::int[], %(message_id)s::text[],
            %(output)s::int[], %(action)s::int[], %(message_ts)s::timestamptz[])
     AS k(rule_id, version, message_id, output, action, message_ts)
JOIN {tables.RULE} r ON r.id = k.rule_id
ON CONFLICT (rule_id, version, message_id, output, action)
"""
_CLAIM = _INSERT + " DO NOTHING RETURNING rule_id, version, message_id, output, action"
# What fired is fired, whoever claimed it: a run's claim becomes a fired row (and is never
# released then); a fired row stays as it was.
_RECORD = (
    _INSERT
    + f""" DO UPDATE SET fired = TRUE, done_at = EXCLUDED.done_at
WHERE NOT {tables.RULE_ACTION_LEDGER}.fired"""
)
_RELEASE = f"""
DELETE FROM {tables.RULE_ACTION_LEDGER} l
USING unnest(%(rule_id)s::bigint[], %(version)s::int[], %(message_id)s::text[],
             %(output)s::int[], %(action)s::int[]) AS k(rule_id, version, message_id, output, action)
WHERE l.rule_id = k.rule_id AND l.version = k.version AND l.message_id = k.message_id
  AND l.output = k.output AND l.action = k.action
  AND NOT l.fired AND l.run_id IS NOT DISTINCT FROM %(run)s::uuid
"""

_FIRED = f"""
SELECT l.rule_id, l.version, l.message_id, l.output, l.action FROM {tables.RULE_ACTION_LEDGER} l
JOIN unnest(%(rule_id)s::bigint[], %(version)s::int[], %(message_id)s::text[],
            %(output)s::int[], %(action)s::int[]) AS k(rule_id, version, message_id, output, action)
  ON l.rule_id = k.rule_id AND l.version = k.version AND l.message_id = k.message_id
 AND l.output = k.output AND l.action = k.action
WHERE l.fired
"""


def _arrays(keys: Sequence[ActionKey]) -> dict:
    return {
        "rule_id": [k.rule_id for k in keys],
        "version": [k.version for k in keys],
        "message_id": [k.message_id for k in keys],
        "output": [k.output for k in keys],
        "action": [k.action for k in keys],
        "message_ts": [datetime.fromtimestamp(k.ts_ms / 1000, UTC) for k in keys],
    }


def _distinct(keys: Sequence[ActionKey]) -> list[ActionKey]:
    """One key once (an upsert may not touch a row twice in one statement)."""
    seen: dict[tuple, ActionKey] = {}
    for k in keys:
        seen.setdefault((k.rule_id, k.version, k.message_id, k.output, k.action), k)
    return list(seen.values())


def record(
    conn: psycopg.Connection, keys: Sequence[ActionKey], source: str, run_id: str | None = None
) -> None:
    """Remember `keys` as fired (a claim of them becomes fired; fired rows stay as they are)."""
    if keys:
        conn.execute(
            _RECORD,
            {
                **_arrays(_distinct(keys)),
                "source": source,
                "now": datetime.now(UTC),
                "fired": True,
                "run": run_id,
            },
        )


def claim(
    conn: psycopg.Connection, keys: Sequence[ActionKey], run_id: str | None = None
) -> set[ActionKey]:
    """Take `keys` for a run (`run_id`: None for a backfill that is no RuleRun): the subset
    nobody had done or claimed yet, now held by it, unconfirmed."""
    if not keys:
        return set()
    rows = conn.execute(
        _CLAIM,
        {**_arrays(keys), "source": RUN, "now": datetime.now(UTC), "fired": False, "run": run_id},
    ).fetchall()
    taken = set(rows)
    return {k for k in keys if (k.rule_id, k.version, k.message_id, k.output, k.action) in taken}


def fired(conn: psycopg.Connection, keys: Sequence[ActionKey]) -> set[ActionKey]:
    """Those of `keys` whose action was done (the live job replaying a batch after a restart)."""
    if not keys:
        return set()
    arrays = _arrays(keys)
    arrays.pop("message_ts")
    done = set(conn.execute(_FIRED, arrays).fetchall())
    return {k for k in keys if (k.rule_id, k.version, k.message_id, k.output, k.action) in done}


_FORGET = f"""
DELETE FROM {tables.RULE_ACTION_LEDGER} l
USING unnest(%(rule_id)s::bigint[], %(version)s::int[], %(message_id)s::text[],
             %(output)s::int[], %(action)s::int[]) AS k(rule_id, version, message_id, output, action)
WHERE l.rule_id = k.rule_id AND l.version = k.version AND l.message_id = k.message_id
  AND l.output = k.output AND l.action = k.action AND l.fired
"""


def forget(conn: psycopg.Connection, keys: Sequence[ActionKey]) -> None:
    """`keys` not done after all (a sink's outputs its sender gave up on, dead letters now): a
    later `new-only` run fires them again."""
    if keys:
        arrays = _arrays(keys)
        arrays.pop("message_ts")
        conn.execute(_FORGET, arrays)


def confirm(conn: psycopg.Connection, keys: Sequence[ActionKey], run_id: str | None = None) -> None:
    """A run's claimed actions that ran: fired now (kept for good)."""
    record(conn, keys, RUN, run_id)


def release(conn: psycopg.Connection, keys: Sequence[ActionKey], run_id: str | None = None) -> None:
    """Give back a run's claims of actions that did not succeed (its unconfirmed ones only)."""
    if keys:
        arrays = _arrays(keys)
        arrays.pop("message_ts")
        conn.execute(_RELEASE, {**arrays, "run": run_id})


class Pending:
    """The live job's successes not written yet: flushed with its bookkeeping, kept (up to a
    bound) while the database is away."""

    def __init__(self, max_pending: int = _MAX_PENDING) -> None:
        self.keys: list[ActionKey] = []
        self.max_pending = max_pending
        self.dropped = 0

    def add(self, keys: Iterable[ActionKey]) -> None:
        self.keys.extend(keys)
        over = len(self.keys) - self.max_pending
        if over > 0:
            # Forgetting one means a later `new-only` run may fire it again: said, not hidden.
            self.dropped += over
            del self.keys[:over]
            log.warning("action ledger: %d keys not recorded (the database was away)", over)

    def flush(self, conn: psycopg.Connection | None) -> bool:
        if not self.keys:
            return True
        if conn is None:
            return False
        try:
            record(conn, self.keys, LIVE)
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            log.warning("action ledger kept for the next batch: %s", exc)
            return False
        self.keys = []
        return True

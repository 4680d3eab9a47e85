"""What the rule jobs write about what they did (counters, dead letters), so that one bad value
or one tenant cannot lose another's.

- Every string is made storable first (`common.stores.postgres_text`: NUL and lone surrogates escaped), and a
  dead letter keeps the exact body its action sent (ASCII JSON) for the replay.
- Each tenant's rows are written in their own transaction: a row Postgres still refuses fails
  that tenant's group only, which is then written row by row (`common.stores.isolation`: a row
  refused alone is logged and counted, and its letter stored without its output).
- When the database is away, nothing is dropped: counters and letters stay pending (counters
  merged per rule, letters up to `max_pending`) and the next flush writes them.

The usage log (the bill) is written apart from these, in the object store (`metering.py`), so a
database failure here never costs a tenant its usage either.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from common.contracts import tables
from common.security import sealed
from common.stores.isolation import AWAY, batch_else_each_sync
from common.stores.postgres_text import storable_json, storable_text
from spark.rules import store as db
from spark.rules.store import RuleDelta

log = logging.getLogger("spark.rules.bookkeeping")

# Errors that say the database (or the connection) is away, not that a row is bad.
_AWAY = AWAY


@dataclass
class DeadLetter:
    rule_id: int
    tenant: str
    action: dict
    output: Any
    error: str
    attempts: int
    body: str = ""  # the exact JSON the action sent
    key: str = ""  # its action ledger key (`ledger.ActionKey.encode`), if the message had an id


INSERT_DEAD_LETTER = f"""
INSERT INTO {tables.RULE_DEAD_LETTER}
    (rule_id, action, output, body, error, attempts, created_at, ledger_key)
SELECT %s, %s, %s, %s, %s, %s, %s, %s WHERE EXISTS (SELECT 1 FROM {tables.RULE} WHERE id = %s)
"""


def letter_params(letter: DeadLetter, now: datetime, output: Any = None) -> tuple:
    action = sealed.without_secrets(letter.action)
    return (
        letter.rule_id,
        storable_json(action),
        storable_json(letter.output if output is None else output),
        storable_text(letter.body),
        storable_text(letter.error)[:2000],
        letter.attempts,
        now,
        letter.key,
        letter.rule_id,
    )


class Books:
    """Pending counters and dead letters of a job, flushed per tenant."""

    def __init__(self, max_pending: int = 100_000) -> None:
        self.deltas: dict[int, RuleDelta] = {}
        self.tenants: dict[int, str] = {}
        self.letters: list[DeadLetter] = []
        self.pauses: dict[int, str] = {}  # rules to pause (pausing.py), with the reason
        self.max_pending = max_pending
        self.written_letters = 0
        self.refused_rows = 0  # rows Postgres refused even alone (logged)
        self.dropped_letters = 0  # beyond max_pending while the database was away

    def add(
        self,
        deltas: Mapping[int, RuleDelta],
        tenants: Mapping[int, str],
        letters: Sequence[DeadLetter] = (),
    ) -> None:
        for rule_id, delta in deltas.items():
            self.deltas.setdefault(rule_id, RuleDelta()).add(delta)
            self.tenants[rule_id] = tenants.get(rule_id, self.tenants.get(rule_id, ""))
        self.letters.extend(letters)
        overflow = len(self.letters) - self.max_pending
        if overflow > 0:
            # The database has been away for long: keep the newest, say how many went.
            del self.letters[:overflow]
            self.dropped_letters += overflow
            log.error("%d dead letters dropped: the database has been away too long", overflow)

    def pause(self, pauses: Mapping[int, str], tenants: Mapping[int, str]) -> None:
        for rule_id, reason in pauses.items():
            self.pauses[rule_id] = reason
            self.tenants.setdefault(rule_id, tenants.get(rule_id, ""))

    @property
    def pending(self) -> bool:
        return bool(self.deltas or self.letters or self.pauses)

    def flush(self, conn: psycopg.Connection | None) -> bool:
        """Write what is pending; True when nothing is left. Never raises: a database that is
        away leaves everything pending for the next call."""
        if conn is None or not self.pending:
            return not self.pending
        try:
            self._flush_metrics(conn)
            self._flush_letters(conn)
            self._flush_pauses(conn)
        except _AWAY as exc:
            log.warning("rule counters and dead letters kept for the next batch: %s", exc)
            return False
        except Exception:  # anything else: keep them, never fail the batch for it
            log.exception("rule counters and dead letters kept for the next batch")
            return False
        return True

    def _flush_metrics(self, conn: psycopg.Connection) -> None:
        by_tenant: dict[str, dict[int, RuleDelta]] = defaultdict(dict)
        for rule_id, delta in self.deltas.items():
            delta.last_error = storable_text(delta.last_error)
            by_tenant[self.tenants.get(rule_id, "")][rule_id] = delta

        def write(items: list[tuple[int, RuleDelta]]) -> None:
            with conn.transaction():
                db.record_metrics(conn, dict(items))

        for _, deltas in sorted(by_tenant.items()):
            self.refused_rows += batch_else_each_sync("rule_metrics", list(deltas.items()), write)
            for rule_id in deltas:
                del self.deltas[rule_id]

    def _flush_letters(self, conn: psycopg.Connection) -> None:
        now = datetime.now(UTC)
        by_tenant: dict[str, list[DeadLetter]] = defaultdict(list)
        for letter in self.letters:
            by_tenant[letter.tenant].append(letter)

        def write(group: list[DeadLetter]) -> None:
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(INSERT_DEAD_LETTER, [letter_params(x, now) for x in group])

        def stand_in(letter: DeadLetter, exc: Exception) -> None:
            self._stand_in(conn, letter, now)

        for _, letters in sorted(by_tenant.items()):
            batch_else_each_sync("rule_dead_letters", letters, write, stand_in)
            self.written_letters += len(letters)
            done = set(map(id, letters))
            self.letters = [x for x in self.letters if id(x) not in done]

    def _flush_pauses(self, conn: psycopg.Connection) -> None:
        for rule_id, reason in sorted(self.pauses.items()):
            try:
                with conn.transaction():
                    if db.pause_rule(conn, rule_id, storable_text(reason)[:2000]):
                        log.warning("rule %s paused: %s", rule_id, reason)
            except _AWAY:
                raise
            except psycopg.Error:
                self.refused_rows += 1
                log.exception("rule %s could not be paused", rule_id)
            del self.pauses[rule_id]

    def _stand_in(self, conn: psycopg.Connection, letter: DeadLetter, now: datetime) -> None:
        """A letter refused alone, stored without its output (the error says what failed)."""
        log.warning("dead letter of rule %s refused; stored without its output", letter.rule_id)
        self.refused_rows += 1
        stand_in = {"unstorable": json.dumps(letter.output, default=str)[:200]}
        stand_in_letter = DeadLetter(
            letter.rule_id,
            letter.tenant,
            letter.action,
            stand_in,
            letter.error,
            letter.attempts,
            key=letter.key,
        )
        try:
            with conn.transaction():
                conn.execute(INSERT_DEAD_LETTER, letter_params(stand_in_letter, now))
        except _AWAY:
            raise
        except psycopg.Error:
            log.exception("dead letter of rule %s lost", letter.rule_id)

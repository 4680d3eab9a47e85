"""The live job's durable queue of action outputs (`tenants_ruleactionretry`): what waits for
another attempt (with its back-off) or for room in its tenant's lane, and what a stopping job
had not sent yet. Rows are written and taken in groups, from the lanes' worker thread; taken
fairly (at most `per_tenant` due rows of each tenant at a time, oldest first) and deleted as
they are taken. Each tenant holds at most `max_per_tenant` rows: beyond, an output is refused
(and its caller dead-letters it)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg

from common.contracts import tables
from common.stores.isolation import batch_else_each_sync
from common.stores.postgres_text import storable_json, storable_text
from spark.rules import store as db


@dataclass
class Waiting:
    rule_id: int
    tenant: str
    action: dict  # without its secret
    body: str  # the output, as the exact JSON sent
    ts_ms: int
    attempts: int
    last_error: str = ""
    delay: float = 0.0  # seconds from now to the next attempt
    key: str = ""  # its action ledger key (`ledger.ActionKey.encode`), if any
    topic: str = ""  # the message's topic and publisher, for the journey ("": unknown)
    client_id: str = ""
    batch: int | None = None  # its job's live micro-batch (not stored: `actions.Job.batch`)


_INSERT = f"""
INSERT INTO {tables.RULE_ACTION_RETRY}
    (rule_id, action, body, ts_ms, attempts, last_error, next_attempt_at, created_at, ledger_key,
     topic, client_id)
SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s
WHERE EXISTS (SELECT 1 FROM {tables.RULE} WHERE id = %s)
"""
_COUNT = f"""
SELECT count(*) FROM {tables.RULE_ACTION_RETRY} q JOIN {tables.RULE} r ON r.id = q.rule_id
JOIN {tables.TENANT} t ON t.id = r.tenant_id WHERE t.slug = %s
"""
_TAKE = f"""
WITH due AS (
    SELECT q.id, row_number() OVER (PARTITION BY r.tenant_id ORDER BY q.next_attempt_at, q.id) n
    FROM {tables.RULE_ACTION_RETRY} q JOIN {tables.RULE} r ON r.id = q.rule_id
    JOIN {tables.TENANT} t ON t.id = r.tenant_id
    WHERE q.next_attempt_at <= %(now)s AND NOT t.slug = ANY(%(busy)s)
)
DELETE FROM {tables.RULE_ACTION_RETRY} q USING {tables.RULE} r, {tables.TENANT} t
WHERE q.id IN (SELECT id FROM due WHERE n <= %(per_tenant)s)
  AND r.id = q.rule_id AND t.id = r.tenant_id
RETURNING q.rule_id, t.slug, q.action, q.body, q.ts_ms, q.attempts, q.last_error, q.ledger_key,
          q.topic, q.client_id
"""


def _params(r: Waiting, now: datetime) -> tuple[object, ...]:
    return (
        r.rule_id,
        storable_json(r.action),
        storable_text(r.body),
        r.ts_ms,
        r.attempts,
        storable_text(r.last_error)[:2000],
        now + timedelta(seconds=r.delay),
        now,
        r.key,
        storable_text(r.topic),
        storable_text(r.client_id),
        r.rule_id,
    )


class RetryStore:
    def __init__(self, dsn: str, max_per_tenant: int = 100_000) -> None:
        self.dsn = dsn
        self.max_per_tenant = max_per_tenant
        self.conn: psycopg.Connection | None = None
        self.lock = threading.Lock()

    def _connection(self) -> psycopg.Connection:
        if self.conn is None or self.conn.closed:
            self.conn = db.connect(self.dsn)
        return self.conn

    def save(self, rows: list[Waiting]) -> list[Waiting]:
        """Keep `rows`; returns those refused (their tenant holds `max_per_tenant` already).
        Raises psycopg.Error when the database is away (the caller keeps them)."""
        now = datetime.now(UTC)
        refused: list[Waiting] = []
        with self.lock:
            conn = self._connection()
            try:
                by_tenant: dict[str, list[Waiting]] = {}
                for row in rows:
                    by_tenant.setdefault(row.tenant, []).append(row)
                for tenant, group in by_tenant.items():
                    held = conn.execute(_COUNT, (tenant,)).fetchone()[0]
                    room = max(0, self.max_per_tenant - held)
                    refused += group[room:]
                    refused += self._insert(conn, group[:room], now)
            except psycopg.Error:
                self.conn = None
                raise
        return refused

    @staticmethod
    def _insert(conn: psycopg.Connection, rows: list[Waiting], now: datetime) -> list[Waiting]:
        """`rows` (one tenant's) in one transaction; when it fails and the database is not
        away, each row in one of its own (`common.stores.isolation`). Returns the rows refused
        alone, their `last_error` saying so (the caller dead-letters them): a tenant's row
        never stays to fail every later save, nor re-inserts the groups saved before it."""

        def insert(group: list[Waiting]) -> None:
            with conn.transaction(), conn.cursor() as cursor:
                cursor.executemany(_INSERT, [_params(r, now) for r in group])

        def refuse(row: Waiting, exc: Exception) -> None:
            row.last_error = f"the durable retry queue refused it: {type(exc).__name__}"
            refused.append(row)

        refused: list[Waiting] = []
        if rows:
            batch_else_each_sync("rule_retries", rows, insert, refuse)
        return refused

    def take(self, per_tenant: int = 50, busy: list[str] | None = None) -> list[Waiting]:
        """The due rows, at most `per_tenant` of each tenant but those `busy` (their lanes are
        full: their rows stay), removed from the queue."""
        with self.lock:
            conn = self._connection()
            try:
                rows = conn.execute(
                    _TAKE,
                    {"now": datetime.now(UTC), "per_tenant": per_tenant, "busy": busy or []},
                ).fetchall()
            except psycopg.Error:
                self.conn = None
                raise
        return [
            Waiting(
                rule_id,
                tenant,
                action if isinstance(action, dict) else json.loads(action),
                body,
                ts_ms,
                attempts,
                last_error,
                key=key or "",
                topic=topic or "",
                client_id=client_id or "",
            )
            for rule_id, tenant, action, body, ts_ms, attempts, last_error, key, topic, client_id in rows
        ]

    def close(self) -> None:
        with self.lock:
            if self.conn is not None:
                self.conn.close()
                self.conn = None

"""The rule jobs' database edge (psycopg, no Django): rules in, counters and dead letters out.

Tables are the control plane's (`tenants_rule`, `tenants_tenant`, `tenants_rulemetrics`,
`tenants_ruledeadletter`); the jobs only read rules and add to counters. Counters are UPSERT
increments, so a live job and a backfill can run side by side; a rule deleted mid-batch is skipped
(never re-created through its metrics row).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

import psycopg

from common.contracts import tables
from common.security import sealed
from spark.rules.plan import RuleSpec

# A rule's outputs per message: its tenant's override of `max_rule_outputs`, else its plan's.
_RULES = f"""
SELECT r.id, t.slug, r.name, r.sql, r.actions, r.version,
       COALESCE(CASE WHEN jsonb_typeof(t.quota_overrides -> 'max_rule_outputs') = 'number'
                     THEN (t.quota_overrides ->> 'max_rule_outputs')::numeric::bigint END,
                p.max_rule_outputs)
FROM {tables.RULE} r JOIN {tables.TENANT} t ON t.id = r.tenant_id
JOIN {tables.PLAN} p ON p.id = t.plan_id
WHERE (%(enabled)s IS FALSE OR (r.enabled AND r.paused_at IS NULL AND t.status = 'active'))
  AND (%(tenant)s::text IS NULL OR t.slug = %(tenant)s::text)
  AND (%(rule)s::text IS NULL OR r.name = %(rule)s::text)
ORDER BY r.id
"""


def connect(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True, connect_timeout=10)


def load_rules(
    conn: psycopg.Connection,
    *,
    tenant: str | None = None,
    rule: str | None = None,
    enabled_only: bool = True,
) -> list[RuleSpec]:
    rows = conn.execute(_RULES, {"enabled": enabled_only, "tenant": tenant, "rule": rule})
    return [
        RuleSpec(
            id=r[0],
            tenant=r[1],
            name=r[2],
            sql=r[3],
            actions=tuple(_actions(r[4])),
            version=int(r[5]),
            max_outputs=None if r[6] is None else int(r[6]),
        )
        for r in rows.fetchall()
    ]


def _actions(value) -> list[dict]:
    """The rule's actions, webhook secrets opened (`common.security.sealed`; one no key opens stays
    sealed, and the webhook action fails without a call)."""
    if isinstance(value, str):
        value = json.loads(value)
    return sealed.open_actions([a for a in (value or []) if isinstance(a, dict)])


def rules_version(conn: psycopg.Connection) -> tuple:
    """Changes whenever a rule (or a tenant's status, plan or quota overrides) is added, edited
    or deleted: a cheap probe the live job runs every batch before reloading the rules."""
    row = conn.execute(
        "SELECT count(*), max(updated_at), sum(id), "
        "(SELECT string_agg(t.status || ':' || t.quota_overrides::text || ':' "
        "   || p.max_rule_outputs, ',' ORDER BY t.id) "
        f" FROM {tables.TENANT} t JOIN {tables.PLAN} p ON p.id = t.plan_id "
        f" WHERE t.id IN (SELECT tenant_id FROM {tables.RULE})) FROM {tables.RULE}"
    ).fetchone()
    return tuple(row)


@dataclass
class RuleDelta:
    matched: int = 0
    passed: int = 0
    failed: int = 0
    actions_ok: int = 0
    actions_failed: int = 0
    last_error: str = ""
    lag_ms: int | None = None
    latencies_ms: list[int] = field(default_factory=list)  # of its actions done (not stored)
    latency_p50_ms: int | None = None  # over the last minutes (`live.RecentLatency`)
    latency_p99_ms: int | None = None

    def add(self, other: RuleDelta) -> None:
        self.matched += other.matched
        self.passed += other.passed
        self.failed += other.failed
        self.actions_ok += other.actions_ok
        self.actions_failed += other.actions_failed
        self.last_error = other.last_error or self.last_error
        if other.lag_ms is not None:
            self.lag_ms = other.lag_ms
        self.latencies_ms += other.latencies_ms
        if other.latency_p50_ms is not None:
            self.latency_p50_ms, self.latency_p99_ms = other.latency_p50_ms, other.latency_p99_ms


_UPSERT = f"""
INSERT INTO {tables.RULE_METRICS}
    (rule_id, matched, passed, failed, actions_ok, actions_failed, last_error, last_error_at,
     lag_ms, latency_p50_ms, latency_p99_ms, updated_at)
SELECT %(rule_id)s, %(matched)s, %(passed)s, %(failed)s, %(actions_ok)s, %(actions_failed)s,
       %(last_error)s, %(last_error_at)s, %(lag_ms)s, %(p50)s, %(p99)s, %(now)s
WHERE EXISTS (SELECT 1 FROM {tables.RULE} WHERE id = %(rule_id)s)
ON CONFLICT (rule_id) DO UPDATE SET
    matched = {tables.RULE_METRICS}.matched + EXCLUDED.matched,
    passed = {tables.RULE_METRICS}.passed + EXCLUDED.passed,
    failed = {tables.RULE_METRICS}.failed + EXCLUDED.failed,
    actions_ok = {tables.RULE_METRICS}.actions_ok + EXCLUDED.actions_ok,
    actions_failed = {tables.RULE_METRICS}.actions_failed + EXCLUDED.actions_failed,
    last_error = CASE WHEN EXCLUDED.last_error <> '' THEN EXCLUDED.last_error
                      ELSE {tables.RULE_METRICS}.last_error END,
    last_error_at = COALESCE(EXCLUDED.last_error_at, {tables.RULE_METRICS}.last_error_at),
    lag_ms = COALESCE(EXCLUDED.lag_ms, {tables.RULE_METRICS}.lag_ms),
    latency_p50_ms = COALESCE(EXCLUDED.latency_p50_ms, {tables.RULE_METRICS}.latency_p50_ms),
    latency_p99_ms = COALESCE(EXCLUDED.latency_p99_ms, {tables.RULE_METRICS}.latency_p99_ms),
    updated_at = EXCLUDED.updated_at
"""


def record_metrics(conn: psycopg.Connection, deltas: dict[int, RuleDelta]) -> None:
    if not deltas:
        return
    now = datetime.now(UTC)
    params = [
        {
            "rule_id": rule_id,
            "matched": d.matched,
            "passed": d.passed,
            "failed": d.failed,
            "actions_ok": d.actions_ok,
            "actions_failed": d.actions_failed,
            "last_error": d.last_error[:2000],
            "last_error_at": now if d.last_error else None,
            "lag_ms": d.lag_ms,
            "p50": d.latency_p50_ms,
            "p99": d.latency_p99_ms,
            "now": now,
        }
        for rule_id, d in sorted(deltas.items())
    ]
    with conn.cursor() as cursor:
        cursor.executemany(_UPSERT, params)


_PAUSE = f"""
UPDATE {tables.RULE} SET paused_at = %(now)s, paused_reason = %(reason)s, updated_at = %(now)s
WHERE id = %(rule_id)s AND paused_at IS NULL
RETURNING tenant_id, name, (SELECT slug FROM {tables.TENANT} WHERE id = tenant_id)
"""
_AUDIT = f"""
INSERT INTO {tables.AUDIT_ENTRY} (tenant_id, tenant_slug, actor, via, action, target, detail, created_at)
VALUES (%s, %s, 'rules job', 'system', 'rule.paused', %s, %s, %s)
"""


def pause_rule(conn: psycopg.Connection, rule_id: int, reason: str) -> bool:
    """Pause a rule (it stops running until its tenant saves or enables it again), with an entry
    in the tenant's audit log; False if it was gone or paused already."""
    now = datetime.now(UTC)
    row = conn.execute(_PAUSE, {"now": now, "reason": reason, "rule_id": rule_id}).fetchone()
    if row is None:
        return False
    tenant_id, name, slug = row
    conn.execute(_AUDIT, (tenant_id, slug or "", name, json.dumps({"reason": reason}), now))
    return True

"""Where shadows live: Postgres (`tenants_shadow`, owned by the control plane's `tenants` app), or
memory for a broker run without a database (`--auth-file`: tests, benchmarks).

A store applies a batch of operations in arrival order (`apply`): a batch is one transaction
that locks the rows it writes (in id order, so two batches, two brokers or the REST API never
deadlock on each other) and writes each changed shadow once, with one history row per accepted
change (`tenants_shadowversion`). Nothing is cached between batches: another broker or the REST
API may have changed a shadow meanwhile, and the lock is what makes a version check true.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Protocol

from psycopg import AsyncCursor
from psycopg.rows import TupleRow, tuple_row
from psycopg_pool import AsyncConnectionPool

from common.contracts import tables
from common.shadow import document as doc
from data_plane.shadows.operations import (
    Operation,
    makes_shadow,
    perform,
    shadow_limit,
    thing_not_found,
)

Key = tuple[str, str, str]  # (tenant, thing, shadow name)


class ShadowStore(Protocol):
    async def apply(self, ops: list[Operation], now: int) -> None:
        """Perform `ops` in order, each recording what came of it; raise only when the store
        itself failed (then none of them took effect)."""


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def _text(value: object) -> str | None:
    return None if value is None else _ENCODER.encode(value)


_KEYS = "unnest(%s::bigint[], %s::text[], %s::text[]) AS k(tenant_id, thing, name)"
_READ = f"""
SELECT k.tenant_id, k.thing, k.name, s.id, s.version, s.present, s.state, s.metadata
  FROM {_KEYS}
  JOIN {tables.DEVICE} d ON d.tenant_id = k.tenant_id AND d.name = k.thing
  JOIN {tables.SHADOW} s ON s.device_id = d.id AND s.name = k.name
 ORDER BY s.id
"""
_LOCK = _READ + " FOR UPDATE OF s"
_CREATE = f"""
INSERT INTO {tables.SHADOW} (tenant_id, device_id, name, version, present, state, metadata,
                            created_at, updated_at)
SELECT d.tenant_id, d.id, k.name, 0, false, '{{}}'::jsonb, '{{}}'::jsonb, now(), now()
  FROM {_KEYS}
  JOIN {tables.DEVICE} d ON d.tenant_id = k.tenant_id AND d.name = k.thing
ON CONFLICT (device_id, name) DO NOTHING
"""
_THINGS = f"""
SELECT k.tenant_id, k.thing FROM {_KEYS}
  JOIN {tables.DEVICE} d ON d.tenant_id = k.tenant_id AND d.name = k.thing
"""
# Rows to write go as one JSON document each (one `json.dumps` in C for the whole batch;
# arrays of JSON texts cost a regex escape per element in the driver).
_WRITE = f"""
UPDATE {tables.SHADOW} s
   SET version = u.version, present = u.present, state = u.state, metadata = u.metadata,
       updated_at = now()
  FROM jsonb_to_recordset(%s::jsonb)
       AS u(id bigint, version bigint, present bool, state jsonb, metadata jsonb)
 WHERE s.id = u.id
"""
_HISTORY = f"""
INSERT INTO {tables.SHADOW_VERSION} (tenant_id, shadow_id, version, operation, state, metadata,
                                   request, client_token, actor, via, published_at, created_at)
SELECT u.tenant_id, u.shadow_id, u.version, u.operation, u.state, u.metadata, u.request,
       u.client_token, u.actor, 'mqtt', now(), now()
  FROM jsonb_to_recordset(%s::jsonb)
       AS u(tenant_id bigint, shadow_id bigint, version bigint, operation text, state jsonb,
            metadata jsonb, request jsonb, client_token text, actor text)
"""

# The shadows each tenant keeps now (`max_shadows`), for the tenants a batch may add one to.
_PRESENT = f"""
SELECT tenant_id, count(*) FROM {tables.SHADOW}
 WHERE tenant_id = ANY(%s::bigint[]) AND present GROUP BY tenant_id
"""
# Each changed shadow's versions past its newest `keep` (`max_shadow_versions`, at least the
# newest), never one whose replies are still to be published (a REST change's): one statement
# a batch, each shadow's newest `keep` found on its (shadow, -id) index.
_PRUNE = f"""
DELETE FROM {tables.SHADOW_VERSION} v
 USING jsonb_to_recordset(%s::jsonb) AS k(shadow_id bigint, keep int)
 WHERE v.shadow_id = k.shadow_id AND v.published_at IS NOT NULL
   AND v.id < (SELECT min(w.id) FROM (SELECT id FROM {tables.SHADOW_VERSION}
                                       WHERE shadow_id = k.shadow_id
                                       ORDER BY id DESC LIMIT GREATEST(k.keep, 1)) w)
"""

# A shadow's key: (tenant id, thing, shadow name).
ShadowKey = tuple[int | None, str, str]


def _columns(keys: list[ShadowKey]) -> list[list[object]]:
    return [[k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]]


class PostgresShadows:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def apply(self, ops: list[Operation], now: int) -> None:
        keys = list(dict.fromkeys((op.tenant_id, op.topic.thing, op.topic.shadow) for op in ops))
        writes = any(op.writes for op in ops)
        # Pipelined: BEGIN goes with the read, the writes with COMMIT: two round trips a batch.
        async with self.pool.connection() as conn, conn.pipeline():
            async with conn.transaction():
                cursor = conn.cursor(row_factory=tuple_row)
                rows = await self._read(cursor, keys, writes)
                present = await self._present(cursor, ops, rows)
                missing = [key for key in keys if key not in rows]
                created = self._room(
                    [
                        key
                        for key in missing
                        if any(
                            op.writes and (op.tenant_id, op.topic.thing, op.topic.shadow) == key
                            for op in ops
                        )
                    ],
                    ops,
                    present,
                )
                if created:  # a shadow's first write: its row, then locked like the others
                    await cursor.execute(_CREATE, _columns(created))
                    rows.update(await self._read(cursor, created, True))
                    missing = [key for key in keys if key not in rows]
                things = await self._things(cursor, missing) if missing else set()
                changed, history = self._perform(ops, rows, things, now, present)
                if changed:
                    rows_out = [
                        {
                            "id": row_id,
                            "version": s.version,
                            "present": s.present,
                            "state": s.state,
                            "metadata": s.metadata,
                        }
                        for row_id, s in changed
                    ]
                    await cursor.execute(_WRITE, (_text(rows_out),))
                if history:
                    await cursor.execute(_HISTORY, (_text(history),))
                    keep = {
                        row["shadow_id"]: row["keep"] for row in history if row["keep"] is not None
                    }
                    if keep:
                        pruned = [{"shadow_id": k, "keep": v} for k, v in keep.items()]
                        await cursor.execute(_PRUNE, (_text(pruned),))

    @staticmethod
    async def _present(
        cursor: AsyncCursor[TupleRow],
        ops: list[Operation],
        rows: dict[ShadowKey, tuple[int, doc.Shadow]],
    ) -> dict[int | None, int]:
        """The shadows each tenant keeps now, for the tenants of an update that may make one
        (a limit applies, and its shadow is not present)."""
        tenants = {
            op.tenant_id
            for op in ops
            if makes_shadow(
                op, (rows.get((op.tenant_id, op.topic.thing, op.topic.shadow)) or (0, None))[1]
            )
        }
        if not tenants:
            return {}
        await cursor.execute(_PRESENT, (sorted(t for t in tenants if t is not None),))
        present: dict[int | None, int] = dict.fromkeys(tenants, 0)
        present.update({r[0]: r[1] for r in await cursor.fetchall()})
        return present

    @staticmethod
    def _room(
        created: list[ShadowKey], ops: list[Operation], present: dict[int | None, int]
    ) -> list[ShadowKey]:
        """The new shadows' rows to make: those of a tenant with room under `max_shadows`
        (in arrival order); an update of another is refused (`_perform`), so a tenant at its
        limit makes no row, not even an empty one."""
        limits = {op.tenant_id: op.max_shadows for op in ops if op.max_shadows is not None}
        made: dict[int | None, int] = {}
        out = []
        for key in created:
            most = limits.get(key[0])
            if most is not None:
                if present.get(key[0], 0) + made.get(key[0], 0) >= most:
                    continue
                made[key[0]] = made.get(key[0], 0) + 1
            out.append(key)
        return out

    async def _read(
        self, cursor: AsyncCursor[TupleRow], keys: list[ShadowKey], lock: bool
    ) -> dict[ShadowKey, tuple[int, doc.Shadow]]:
        await cursor.execute(_LOCK if lock else _READ, _columns(keys))
        return {
            (r[0], r[1], r[2]): (r[3], doc.Shadow(r[4], r[6] or {}, r[7] or {}, r[5]))
            for r in await cursor.fetchall()
        }

    async def _things(
        self, cursor: AsyncCursor[TupleRow], keys: list[ShadowKey]
    ) -> set[tuple[int, str]]:
        await cursor.execute(_THINGS, _columns(keys))
        return {(r[0], r[1]) for r in await cursor.fetchall()}

    @staticmethod
    def _perform(
        ops: list[Operation],
        rows: dict[ShadowKey, tuple[int, doc.Shadow]],
        things: set[tuple[int, str]],
        now: int,
        present: dict[int | None, int] | None = None,
    ) -> tuple[list[tuple[int, doc.Shadow]], list[dict[str, object]]]:
        """Each operation in turn on the rows read: the shadows changed (last state each) and
        the history rows, in order. `present`: the shadows each tenant keeps (those a new
        shadow may be refused for, `max_shadows`), kept up to date as the batch goes."""
        current: dict[ShadowKey, tuple[int, doc.Shadow]] = dict(rows)
        changed: dict[int, doc.Shadow] = {}
        history: list[dict[str, object]] = []
        present = dict(present or {})
        for op in ops:
            key = (op.tenant_id, op.topic.thing, op.topic.shadow)
            row = current.get(key)
            if makes_shadow(op, row[1] if row is not None else None) and (
                row is None or present.get(op.tenant_id, 0) >= (op.max_shadows or 0)
            ):
                if row is None and (op.tenant_id, op.topic.thing) not in things:
                    thing_not_found(op)
                else:  # no room was left for its row, or none is now
                    shadow_limit(op)
                continue
            if row is None:
                if (op.tenant_id, op.topic.thing) in things:  # a device without this shadow
                    perform(op, doc.Shadow(), now)
                else:
                    thing_not_found(op)
                continue
            row_id, shadow = row
            after = perform(op, shadow, now)
            if after is None:
                continue
            if op.tenant_id in present and shadow.present != after.present:
                present[op.tenant_id] += 1 if after.present else -1
            current[key] = (row_id, after)
            changed[row_id] = after
            request = op.request
            update = op.outcome is not None
            history.append(
                {
                    "tenant_id": op.tenant_id,
                    "shadow_id": row_id,
                    "version": after.version if update else op.deleted,
                    "operation": "update" if update else "delete",
                    "state": after.state,
                    "metadata": after.metadata,
                    "request": None if not update or request.clear else request.state,
                    "client_token": request.client_token or "",
                    "actor": op.actor,
                    "keep": op.max_versions,
                }
            )
        return list(changed.items()), history


class MemoryShadows:
    """Shadows in this process only (a broker without a database): `things(tenant, thing)` says
    whether a thing is one of the tenant's devices."""

    def __init__(self, things: Callable[[str, str], bool]) -> None:
        self.things = things
        self.shadows: dict[Key, doc.Shadow] = {}
        self.history: dict[Key, list[tuple[int, str, dict[str, object]]]] = {}

    async def apply(self, ops: list[Operation], now: int) -> None:
        for op in ops:
            if not self.things(op.tenant, op.topic.thing):
                thing_not_found(op)
                continue
            current = self.shadows.get(op.key)
            if makes_shadow(op, current) and (op.max_shadows or 0) <= sum(
                s.present for k, s in self.shadows.items() if k[0] == op.tenant
            ):
                shadow_limit(op)
                continue
            after = perform(op, current or doc.Shadow(), now)
            if after is not None:
                self.shadows[op.key] = after
                kind = "update" if op.outcome is not None else "delete"
                versions = self.history.setdefault(op.key, [])
                versions.append((after.version, kind, after.state))
                if op.max_versions is not None:
                    del versions[: -max(op.max_versions, 1)]

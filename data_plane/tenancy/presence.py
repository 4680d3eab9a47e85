"""Who is connected, for the portal's device page, the API's `connected` and the session
inspection (`GET /api/v1/sessions`): each broker writes its live connections (client id, address,
protocol version, since when, subscriptions, clean start, session expiry, and every few seconds
the session's queue depth and in-flight count: `session_figures`) to `tenants_deviceconnection`,
and each device's last disconnect reason to `tenants_device`. Rows name their broker by its
cluster node id when it is in a cluster (what the inspection shows as the session's node).

Hooks only record what happened; one task writes it in batches (every `interval` seconds) and
refreshes this broker's heartbeat, so a broker that died leaves rows readers know to ignore
(`heartbeat_at` older than `STALE_AFTER`) and that the next broker start sweeps.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
import uuid
from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from common.contracts import tables
from common.runtime.cancellation import cancel_and_wait
from common.stores.isolation import each_alone, is_away
from data_plane.broker.broker import Broker
from data_plane.broker.connection import MQTTConnection
from data_plane.broker.session import Session
from data_plane.tenancy import session_figures
from data_plane.tenancy.session_figures import SessionFigures

log = logging.getLogger(__name__)

STALE_AFTER = 90  # seconds without a heartbeat: the row's broker is gone (readers agree)
HEARTBEAT = 30
MAX_PENDING = 50_000  # recorded changes kept while the database is away; then resynchronize

# A run of connects in one statement (arrays, one element per connect; for a client id twice in
# the run, the last connect wins, as it would one statement after the other).
_UP_MANY = f"""
INSERT INTO {tables.DEVICE_CONNECTION}
       (tenant_id, device_id, client_id, connection_key, broker, address, protocol_version,
        transport, connected_at, subscriptions, clean_start, expiry_interval, queued, inflight,
        heartbeat_at)
SELECT DISTINCT ON (t.id, a.client_id)
       t.id, d.id, a.client_id, a.key, %s, a.address, a.version, a.transport,
       to_timestamp(a.at), a.subs::jsonb, a.clean, a.expiry, 0, 0, now()
  FROM unnest(%s::text[], %s::text[], %s::text[], %s::int[], %s::text[], %s::float8[],
              %s::text[], %s::text[], %s::text[], %s::bool[], %s::bigint[]) WITH ORDINALITY
       AS a(client_id, key, address, version, transport, at, subs, device, tenant, clean, expiry,
            n)
  JOIN {tables.TENANT} t ON t.slug = a.tenant
  JOIN {tables.DEVICE} d ON d.tenant_id = t.id AND d.name = a.device
 ORDER BY t.id, a.client_id, a.n DESC
ON CONFLICT (tenant_id, client_id) DO UPDATE SET
       device_id = EXCLUDED.device_id, connection_key = EXCLUDED.connection_key,
       broker = EXCLUDED.broker, address = EXCLUDED.address,
       protocol_version = EXCLUDED.protocol_version, transport = EXCLUDED.transport,
       connected_at = EXCLUDED.connected_at, subscriptions = EXCLUDED.subscriptions,
       clean_start = EXCLUDED.clean_start, expiry_interval = EXCLUDED.expiry_interval,
       queued = 0, inflight = 0, heartbeat_at = now()
"""
_SUBSCRIPTIONS = (
    f"UPDATE {tables.DEVICE_CONNECTION} SET subscriptions = %s WHERE connection_key = %s"
)
# A run of disconnects in two statements (a device that left twice keeps its last reason).
_DOWN_MANY = f"DELETE FROM {tables.DEVICE_CONNECTION} WHERE connection_key = ANY(%s::text[])"
_LAST_DISCONNECT_MANY = f"""
UPDATE {tables.DEVICE} d SET last_disconnect_reason = a.reason,
       last_disconnected_at = to_timestamp(a.at)
  FROM (SELECT DISTINCT ON (u.tenant, u.device) u.reason, u.at, u.tenant, u.device
          FROM unnest(%s::text[], %s::float8[], %s::text[], %s::text[]) WITH ORDINALITY
               AS u(reason, at, tenant, device, n)
         ORDER BY u.tenant, u.device, u.n DESC) a
  JOIN {tables.TENANT} t ON t.slug = a.tenant
 WHERE d.tenant_id = t.id AND d.name = a.device
"""
_HEARTBEAT = f"UPDATE {tables.DEVICE_CONNECTION} SET heartbeat_at = now() WHERE broker = %s"
_SWEEP = (
    f"DELETE FROM {tables.DEVICE_CONNECTION} WHERE heartbeat_at < now() - make_interval(secs => %s)"
)


def _runs(ops: list[tuple]) -> list[tuple[str, list[tuple]]]:
    """Consecutive changes of the same kind, grouped, the order kept."""
    runs: list[tuple[str, list[tuple]]] = []
    for op in ops:
        if runs and runs[-1][0] == op[0]:
            runs[-1][1].append(op)
        else:
            runs.append((op[0], [op]))
    return runs


def subscriptions_of(session: Session | None) -> list[dict]:
    return [
        {"filter": s.topic_filter, "qos": s.qos}
        for s in list(getattr(session, "subscriptions", {}).values())
    ]


class Presence:
    def __init__(self, broker: Broker, pool: AsyncConnectionPool, *, interval: float = 0.5) -> None:
        self.broker, self.pool, self.interval = broker, pool, interval
        # In a cluster the node's own id, so that the inspection names the node as the cluster
        # does (its metrics, logs, takeovers); else one of this process's own.
        node = getattr(getattr(broker, "cluster", None), "node_id", None)
        self.broker_id = node or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.figures = SessionFigures()  # queue depth and in flight, sampled (session_figures)
        self._keys: dict[int, str] = {}  # id(connection) -> its row's key
        self._sessions: dict[str, object] = {}  # row key -> the connection's session (figures)
        self._ops: list[tuple] = []
        self._since: dict[int, float] = {}  # id(connection) -> when it connected
        self._resync = False  # too much piled up: rewrite this broker's rows from what is live
        self._task: asyncio.Task | None = None
        hooks = broker.hooks
        hooks.add("client.connected", self._connected)
        hooks.add("client.disconnected", self._disconnected)
        hooks.add("session.subscribed", lambda session, sub: self._subscriptions(session))
        hooks.add("session.unsubscribed", lambda session, f: self._subscriptions(session))

    # -- hooks: record only ---------------------------------------------------------------

    def _connected(self, conn: MQTTConnection) -> None:
        key = self._keys[id(conn)] = uuid.uuid4().hex
        self._sessions[key] = conn.session
        self._since[id(conn)] = time.time()
        self._record(self._up(conn, key, self._since[id(conn)]))

    @staticmethod
    def _up(conn: MQTTConnection, key: str, at: float) -> tuple:
        return (
            "up",
            key,
            conn.tenant,
            conn.device,
            conn.client_id,
            conn.peer.rsplit(":", 1)[0],
            conn.protocol_version,
            conn.transport_name,
            at,
            subscriptions_of(conn.session),
            bool(getattr(conn, "clean_start", True)),
            int(getattr(conn.session, "expiry_interval", 0) or 0),
        )

    def _record(self, op: tuple) -> None:
        if self._resync:
            return  # the resynchronization writes the state as it is then
        self._ops.append(op)
        if len(self._ops) > MAX_PENDING:
            log.warning("presence: %d changes pending; will rewrite from live state", MAX_PENDING)
            self._ops.clear()
            self._resync = True

    def _subscriptions(self, session: Session) -> None:
        conn = session.connection
        key = self._keys.get(id(conn)) if conn is not None else None
        if key is not None:
            self._record(("subs", key, subscriptions_of(session)))

    def _disconnected(self, conn: MQTTConnection) -> None:
        key = self._keys.pop(id(conn), None)
        self._since.pop(id(conn), None)
        if key is not None:
            self._sessions.pop(key, None)
            self.figures.forget(key)
            reason = conn.disconnect_reason or "unknown"
            self._record(("down", key, conn.tenant, conn.device, reason, time.time()))

    # -- the writer -------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="presence")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        try:
            await self.flush()
            async with self.pool.connection() as conn:
                await conn.execute(
                    f"DELETE FROM {tables.DEVICE_CONNECTION} WHERE broker = %s", (self.broker_id,)
                )
        except Exception as exc:
            log.warning("presence: final write failed: %s", exc)

    async def _run(self) -> None:
        beat = sampled = time.monotonic()
        try:
            async with self.pool.connection() as conn:
                await conn.execute(_SWEEP, (STALE_AFTER,))
        except Exception as exc:
            log.warning("presence: sweep failed: %s", exc)
        while True:
            await asyncio.sleep(self.interval)
            try:
                sample = time.monotonic() - sampled >= session_figures.EVERY
                await self.flush(figures=sample)
                if sample:
                    sampled = time.monotonic()
                if time.monotonic() - beat >= HEARTBEAT:
                    beat = time.monotonic()
                    async with self.pool.connection() as conn:
                        await conn.execute(_HEARTBEAT, (self.broker_id,))
            except Exception as exc:  # the database is away: the ops wait for the next turn
                log.warning("presence: write failed (%s); retrying", exc)

    async def _write(self, ops: list[tuple], sample: list[tuple[str, int, int]]) -> None:
        """`ops`, then the sample of figures, in one transaction."""
        async with self.pool.connection() as conn, conn.transaction():
            cursor = conn.cursor()
            # Runs of changes of one kind go as one statement each (arrays: one round trip and
            # one plan per run, not per change), in the order they happened. A statement per
            # change made a connect storm's presence fall seconds behind (bench/presence.py,
            # bench/RESULTS.md).
            for kind, run in _runs(ops):
                for statement, params in self._statements(kind, run):
                    await cursor.executemany(statement, params)
            if sample:
                await cursor.execute(session_figures.UPDATE, self.figures.params(sample))

    def _statements(self, kind: str, run: list[tuple]) -> list[tuple[str, list[tuple]]]:
        """The statements (and their parameter rows) that write a run of changes of `kind`:
        connects and disconnects as arrays, one statement for the whole run."""
        if kind == "up":
            columns: list[list[Any]] = [[] for _ in range(11)]
            for op in run:
                _, key, tenant, device, client_id, address, version, transport, at, subs = op[:10]
                values = (client_id, key, address, version, transport, at)
                row = (*values, json.dumps(subs), device, tenant, *op[10:])
                for column, value in zip(columns, row, strict=True):
                    column.append(value)
            return [(_UP_MANY, [(self.broker_id, *columns)])]
        if kind == "wipe":
            return [
                (f"DELETE FROM {tables.DEVICE_CONNECTION} WHERE broker = %s", [(self.broker_id,)])
            ]
        if kind == "subs":
            return [(_SUBSCRIPTIONS, [(Jsonb(op[2]), op[1]) for op in run])]
        keys = [op[1] for op in run]
        reasons = [[op[4] for op in run], [op[5] for op in run]]
        who = [[op[2] for op in run], [op[3] for op in run]]
        return [(_DOWN_MANY, [(keys,)]), (_LAST_DISCONNECT_MANY, [(*reasons, *who)])]

    async def flush(self, *, figures: bool = False) -> None:
        """Write the changes recorded since the last flush; with `figures`, also a sample of the
        sessions' queue depth and in-flight count (session_figures), in the same transaction,
        after the rows they update."""
        if self._resync:
            # This broker's rows from scratch: whatever is connected now.
            connections = [
                c for c in list(getattr(self.broker, "connections", ())) if id(c) in self._keys
            ]
            ops = [("wipe",)] + [
                self._up(c, self._keys[id(c)], self._since.get(id(c), time.time()))
                for c in connections
            ]
            self._ops, self._resync = [], False
        else:
            ops, self._ops = self._ops, []
        if not ops and not figures:
            return
        sample: list[tuple[str, int, int]] = []
        if figures:
            # Whose rows exist once `ops` are written: taken with them, so that a connection
            # recorded meanwhile (its row not written yet) is sampled next time, not lost.
            sample = await self.figures.sample(list(self._sessions), self._sessions)
        if ops and ops[0] == ("wipe",):
            self.figures.reset()  # rows rewritten at (0, 0): a sample from now on
            sample = []
        try:
            try:
                await self._write(ops, sample)
            except Exception as exc:
                if is_away(exc) or not ops:
                    raise
                # Every tenant's changes share the transaction: each again alone, so one that
                # Postgres refuses is dropped (logged, counted) and the rest are written.
                log.warning("presence: %d changes failed (%s): each alone", len(ops), exc)
                await each_alone("presence", ops, lambda op: self._write([op], []))
                if sample:
                    await self._write([], sample)
        except Exception:
            if ops and ops[0] == ("wipe",):
                self._resync = True
            else:
                self._ops[:0] = ops  # keep the order: written on the next turn
                if len(self._ops) > MAX_PENDING:
                    self._ops.clear()
                    self._resync = True
            raise
        if sample:
            live = self._sessions  # not those that left meanwhile (forgotten)
            self.figures.written([row for row in sample if row[0] in live])

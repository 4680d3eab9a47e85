"""Alarms in the live rules job (issue 46): the tenants' enabled alarms read each message in the
same Spark plan as their rules, and each key's state moves by `common.alarms.machine`.

- Reading. An alarm is one rule of the dialect (`common.alarms.definition.alarm_sql`) evaluated
  beside the tenants' rules, under the same per-tenant shares and budgets, with the id
  `-definition id` (rule ids are positive): its results are taken out of the batch's before the
  rules' actions and counters see them (`split`).
- State. Each (alarm, key)'s `KeyState` is held here, on the driver, and written to Postgres —
  the state, its transitions and the batch's feed position in one transaction (`save`) — so a
  restart loads them and skips the batches already taken: an active alarm is neither lost nor
  raised twice. (The job's live feed is a loop of small batch jobs, not a streaming query, so
  Spark's own state store has no place here; the table is the checkpoint.)
- Time. Timers (`for`, clearing, no data, re-notification) fire at their own instants when the
  job's clock passes them (`tick`, with the time before which the feed has every message: its
  writers' lowest mark). A batch just read moves that clock; the keys it holds no message for
  need not wait for its evaluation (`due`, `in_flight`, then `tick` holding the others).
- Acknowledgements are the control plane's: a key it marked acknowledged is read back (`_acked`)
  and moved in the machine without a second transition; the job never writes `active` over one.
"""

from __future__ import annotations

import heapq
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from common.alarms import machine
from common.alarms.definition import AlarmSpec, alarm_sql, compile_alarm, read, storable_key
from common.alarms.machine import KeyState, Timing, Transition
from common.contracts import tables
from common.rules import CompiledRule, default_budget
from common.stores.isolation import each_alone_sync, is_away
from common.stores.postgres_text import storable_text, storable_value
from spark.rules.plan import RuleSpec
from spark.rules.refusals import count_refused
from spark.rules.results import BatchResults

log = logging.getLogger(__name__)

# Per alarm, the keys a batch in flight carries (None: every key of it); see `in_flight`.
Held = dict[int, set[str] | None]

_DEFINITIONS = f"""
SELECT a.id, t.slug, a.name, a.source, a.key, a.raise_condition, a.raise_for_seconds,
       a.clear_condition, a.clear_for_seconds, a.no_data_seconds, a.value, a.renotify_seconds,
       a.version, a.notifications, a.no_data_keys, a.seen_days,
       COALESCE(CASE WHEN jsonb_typeof(t.quota_overrides -> 'max_alarm_keys') = 'number'
                     THEN (t.quota_overrides ->> 'max_alarm_keys')::numeric::bigint END,
                p.max_alarm_keys)
  FROM {tables.ALARM_DEFINITION} a JOIN {tables.TENANT} t ON t.id = a.tenant_id
  JOIN {tables.PLAN} p ON p.id = t.plan_id
 WHERE a.enabled AND t.status = 'active'
 ORDER BY a.id
"""
_DEVICES = f"""
SELECT d.name FROM {tables.DEVICE} d JOIN {tables.TENANT} t ON t.id = d.tenant_id
 WHERE t.slug = %s AND d.enabled
"""
_FORGET = f"DELETE FROM {tables.ALARM_STATE} WHERE definition_id = %s AND key = %s"
_PROBE = f"SELECT count(*), max(updated_at), sum(id) FROM {tables.ALARM_DEFINITION} WHERE enabled"
_STATES = f"""
SELECT definition_id, key, status, machine FROM {tables.ALARM_STATE}
 WHERE definition_id = ANY(%s)
"""
_ACKED = f"""
SELECT definition_id, key, acknowledged_at, acknowledged_by FROM {tables.ALARM_STATE}
 WHERE status = 'acknowledged' AND definition_id = ANY(%s) AND acknowledged_at > %s
"""
# The job never writes `active` over a person's acknowledgement (it may have read it late).
_UPSERT = f"""
INSERT INTO {tables.ALARM_STATE} (tenant_id, definition_id, key, status, since, value, cause,
                                  raised_at, cleared_at, machine, updated_at)
SELECT a.tenant_id, a.id, %(key)s, %(status)s, %(since)s, %(value)s, %(cause)s, %(raised)s,
       %(cleared)s, %(machine)s, now()
  FROM {tables.ALARM_DEFINITION} a WHERE a.id = %(alarm)s
ON CONFLICT (definition_id, key) DO UPDATE SET
  status = CASE WHEN {tables.ALARM_STATE}.status = 'acknowledged' AND EXCLUDED.status = 'active'
                THEN 'acknowledged' ELSE EXCLUDED.status END,
  since = CASE WHEN {tables.ALARM_STATE}.status = 'acknowledged' AND EXCLUDED.status = 'active'
               THEN {tables.ALARM_STATE}.since ELSE EXCLUDED.since END,
  value = EXCLUDED.value, cause = EXCLUDED.cause,
  raised_at = COALESCE(EXCLUDED.raised_at, {tables.ALARM_STATE}.raised_at),
  cleared_at = CASE WHEN EXCLUDED.status = 'normal'
                    THEN COALESCE(EXCLUDED.cleared_at, {tables.ALARM_STATE}.cleared_at) END,
  acknowledged_at = CASE WHEN EXCLUDED.status IN ('normal', 'pending') THEN NULL
                         ELSE {tables.ALARM_STATE}.acknowledged_at END,
  acknowledged_by = CASE WHEN EXCLUDED.status IN ('normal', 'pending') THEN NULL
                         ELSE {tables.ALARM_STATE}.acknowledged_by END,
  machine = EXCLUDED.machine, updated_at = now()
"""
_TRANSITION = f"""
INSERT INTO {tables.ALARM_TRANSITION} (tenant_id, definition_id, key, event, before, after, at,
                                       value, cause, message_id, note)
SELECT a.tenant_id, a.id, %s, %s, %s, %s, %s, %s, %s, %s, '' FROM {tables.ALARM_DEFINITION} a
 WHERE a.id = %s
RETURNING id, tenant_id
"""
_NOTIFICATION = f"""
INSERT INTO {tables.ALARM_NOTIFICATION} (tenant_id, transition_id, kind, index, target, state,
                                         attempts, next_at, last_error, created_at)
VALUES (%s, %s, %s, %s, %s, 'pending', 0, now(), '', now())
"""
# Which notifications a transition makes (a re-notification is a raise's again).
NOTIFIES = {machine.RAISE: "raise", machine.RENOTIFY: "raise", machine.CLEAR: "clear"}
_POSITION = f"""
INSERT INTO {tables.RULE_FEED_POSITION} (stream, acted, evaluated, updated_at)
VALUES (%s, %s, %s, now())
ON CONFLICT (stream) DO UPDATE SET acted = EXCLUDED.acted, evaluated = EXCLUDED.evaluated,
    updated_at = EXCLUDED.updated_at
"""
_LOAD_POSITION = f"SELECT evaluated FROM {tables.RULE_FEED_POSITION} WHERE stream = %s"


@dataclass(frozen=True, slots=True)
class Alarm:
    """An enabled definition as the job runs it."""

    id: int
    tenant: str
    name: str
    spec: AlarmSpec
    timing: Timing
    version: int
    notifications: tuple[dict[str, Any], ...] = ()  # {kind, target, on[, secret]}
    devices: bool = False  # no data watched for the tenant's devices too, not only keys seen
    seen_days: int = 7  # a key seen on no message for this long is forgotten
    max_keys: int | None = None  # the tenant's `max_alarm_keys`

    def notified(self, event: str) -> list[tuple[int, dict[str, Any]]]:
        """The targets (index, notification) a transition of `event` is sent to."""
        on = NOTIFIES.get(event)
        return [(i, n) for i, n in enumerate(self.notifications) if on in n.get("on", ())]

    def rule(self) -> RuleSpec:
        return RuleSpec(-self.id, self.tenant, f"alarm {self.name}", alarm_sql(self.spec), (), 1)


def _alarm(row: Sequence[Any]) -> Alarm:
    (alarm_id, tenant, name, source, key, raise_if, raise_for, clear_if, clear_for, no_data,
     value, renotify, version, notifications, no_data_keys, seen_days, max_keys) = row  # fmt: skip
    spec = AlarmSpec(
        source, raise_if or "", key or "clientid", clear_if or "", float(raise_for or 0),
        None if clear_for is None else float(clear_for),
        None if no_data is None else float(no_data), value or "",
    )  # fmt: skip
    timing = Timing(
        spec.raise_for, spec.clear_seconds, spec.no_data, None if not renotify else float(renotify)
    )
    if isinstance(notifications, str):
        notifications = json.loads(notifications)
    targets = tuple(n for n in notifications or () if isinstance(n, dict))
    return Alarm(
        int(alarm_id), tenant, name, spec, timing, int(version), targets,
        no_data is not None and no_data_keys == "devices", int(seen_days or 7),
        None if max_keys is None else int(max_keys),
    )  # fmt: skip


def split(results: BatchResults) -> tuple[BatchResults, list[Any]]:
    """The batch's results for rules, and the alarms' rows (their rule ids are negative)."""
    if not any(r.rule_id < 0 for r in results.rows) and not any(
        s.rule_id < 0 for s in results.skipped
    ):
        return results, []
    alarms = [r for r in results.rows if r.rule_id < 0]
    rules = BatchResults(
        [r for r in results.rows if r.rule_id >= 0],
        [s for s in results.skipped if s.rule_id >= 0],
    )
    return rules, alarms


def machine_json(state: KeyState) -> str:
    """A key's machine as it is checkpointed."""
    return json.dumps(asdict(state), default=str)


def _state(saved: Any) -> KeyState:
    data = saved if isinstance(saved, dict) else json.loads(saved or "{}")
    known = {f: data[f] for f in KeyState.__dataclass_fields__ if f in data}
    return KeyState(**known)


def _when(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def storable(value: Any) -> Any:
    """A message's value as Postgres' jsonb takes it: no NUL, no lone surrogate (escaped, as
    `common.stores.postgres_text` does), no NaN or Infinity (as text)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        return {storable_text(str(k)): storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [storable(v) for v in value]
    return storable_value(value)


def _value(value: Any) -> str | None:
    return None if value is None else json.dumps(value, allow_nan=False, default=str)


class AlarmKeeper:
    """The enabled alarms and each key's state (see the module)."""

    def __init__(self, stream: str, after: Callable[[str, str], bool]) -> None:
        self.stream = f"{stream}#alarms"  # its position's row in the feed positions' table
        self.after = after  # position a is after position b
        self.alarms: dict[int, Alarm] = {}
        self.states: dict[tuple[int, str], KeyState] = {}
        self.changed: set[tuple[int, str]] = set()
        self.transitions: list[tuple[int, Transition]] = []
        self.position: str | None = None  # the last batch taken (saved or not yet)
        self.saved: str | None = None
        self._probe: tuple[Any, ...] | None = None
        self._acked_since = datetime.now(UTC)
        self.keys: Counter[str] = Counter()  # states kept per tenant (`max_alarm_keys`)
        self.refused: Counter[str] = Counter()  # new keys refused by it, not yet written
        self.forgotten: list[tuple[int, str]] = []  # states to delete (not seen for days)
        self._devices_read = 0.0  # when the tenants' devices were last read (no data)
        # Each key's next timer: (due, alarm id, key), the earliest first; an entry whose key
        # moved on since is found stale when it comes up (`tick`), so none is ever removed.
        self._due: list[tuple[float, int, str]] = []
        self._scheduled: dict[tuple[int, str], float] = {}  # each key's live entry in `_due`
        self._swept = time.time()  # the last look for keys to forget (`seen_days`)
        # The transitions a message made, for the journey: (its result row, alarm name, it)
        self.journey: list[tuple[Any, str, Transition]] = []
        self._compiled: dict[int, tuple[int, CompiledRule]] = {}  # alarm -> (version, its rule)

    # -- what to evaluate ------------------------------------------------------------------

    def refresh(self, conn: psycopg.Connection) -> None:
        """Read the enabled alarms again when they changed; load the states of new ones."""
        probe = tuple(conn.execute(_PROBE).fetchone() or ())
        if probe == self._probe:
            return
        alarms = {a.id: a for a in map(_alarm, conn.execute(_DEFINITIONS).fetchall())}
        new = [i for i in alarms if i not in self.alarms]
        for gone in set(self.alarms) - set(alarms):
            for state_key in [k for k in self.states if k[0] == gone]:
                del self.states[state_key]
                self.changed.discard(state_key)
        if new:
            for alarm_id, key, status, saved in conn.execute(_STATES, (new,)).fetchall():
                state = self.states[(alarm_id, key)] = _state(saved)
                if status == machine.ACKNOWLEDGED and state.status == machine.ACTIVE:
                    state.status = machine.ACKNOWLEDGED  # acknowledged while the job was away
                self._schedule(alarms[alarm_id], key, state)
        if self.saved is None:
            row = conn.execute(_LOAD_POSITION, (self.stream,)).fetchone()
            self.saved = self.position = row[0] if row else None
        self.alarms, self._probe = alarms, probe
        self.keys = Counter(self.alarms[a].tenant for a, _ in self.states if a in self.alarms)
        self._devices_read = 0.0  # the new set's devices at once

    def watch_devices(self, conn: psycopg.Connection, every: float = 60.0) -> None:
        """The tenant's devices watched for no data by alarms that ask for it (`no_data_keys`
        devices): a device without a state gets one from now, so one that never sends raises.
        Looked at again every minute (devices added since)."""
        now = time.time()
        if now - self._devices_read < every:
            return
        self._devices_read = now
        devices: dict[str, list[str]] = {}
        for alarm in self.alarms.values():
            if not alarm.devices:
                continue
            if alarm.tenant not in devices:
                rows = conn.execute(_DEVICES, (alarm.tenant,)).fetchall()
                devices[alarm.tenant] = [r[0] for r in rows]
            for device in devices[alarm.tenant]:
                if (alarm.id, device) not in self.states and self._room(alarm):
                    state = self._new(alarm, device)
                    machine.seed(state, now)
                    self._schedule(alarm, device, state)

    def _room(self, alarm: Alarm) -> bool:
        """Whether the tenant may keep one more state (`max_alarm_keys`); counted when not."""
        if alarm.max_keys is not None and self.keys[alarm.tenant] >= alarm.max_keys:
            self.refused[alarm.tenant] += 1
            return False
        return True

    def _schedule(self, alarm: Alarm, key: str, state: KeyState) -> None:
        """The key's next timer into the heap — unless an entry at or before it is there already
        (it reschedules when it comes up): at most one live entry a key, however many messages."""
        state_key = (alarm.id, key)
        due = machine.next_due(state, alarm.timing)
        if due is None:
            return
        scheduled = self._scheduled.get(state_key)
        if scheduled is not None and scheduled <= due:
            return
        self._scheduled[state_key] = due
        heapq.heappush(self._due, (due, alarm.id, key))

    def _new(self, alarm: Alarm, key: str) -> KeyState:
        state = self.states[(alarm.id, key)] = KeyState()
        self.keys[alarm.tenant] += 1
        return state

    def rules(self) -> list[RuleSpec]:
        return [a.rule() for a in self.alarms.values()]

    # -- what happened -----------------------------------------------------------------------

    def taken(self, position: str | None) -> bool:
        """Was the batch ending at `position` taken before (a restart's replay)?"""
        return (
            position is not None and self.saved is not None and not self.after(position, self.saved)
        )

    def take(self, rows: Iterable[Any], position: str | None = None) -> int:
        """The alarms' result rows of one batch, in time order per key; returns transitions."""
        count = 0
        ordered = sorted(
            (r for r in rows if r.status == "passed" and r.outputs), key=lambda r: r.ts
        )
        for row in ordered:
            alarm = self.alarms.get(-row.rule_id)
            if alarm is None:
                continue
            for out in json.loads(row.outputs):
                key = out.get("alarm_key")
                if key is None or key == "":
                    continue
                key = storable_key(key if isinstance(key, str) else str(key))
                state_key = (alarm.id, key)
                state = self.states.get(state_key)
                if state is None:
                    if not self._room(alarm):
                        continue  # over `max_alarm_keys`: counted, the key not watched
                    state = self._new(alarm, key)
                moved = machine.message(
                    key, state, alarm.timing, row.ts.timestamp(),
                    out.get("alarm_raised") is True, out.get("alarm_cleared") is True,
                    storable(out.get("alarm_value")), row.message_id,
                )  # fmt: skip
                self.changed.add(state_key)
                self._schedule(alarm, key, state)
                self.transitions += [(alarm.id, t) for t in moved]
                self.journey += [(row, alarm.name, t) for t in moved if t.message_id is not None]
                count += len(moved)
        if position is not None:
            self.position = position
        return count

    def due(self, now: float) -> set[int]:
        """The alarms with a key whose timer is due by `now` — the heap looked at, nothing
        fired: only its entries at or before `now` are visited (a heap's parent is never
        later than its children)."""
        found: set[int] = set()
        heap, stack = self._due, [0]
        while stack:
            i = stack.pop()
            if i >= len(heap) or heap[i][0] > now:
                continue
            at, alarm_id, key = heap[i]
            stack += (2 * i + 1, 2 * i + 2)
            if alarm_id in found or self._scheduled.get((alarm_id, key)) != at:
                continue
            state, alarm = self.states.get((alarm_id, key)), self.alarms.get(alarm_id)
            if state is not None and alarm is not None:
                next_due = machine.next_due(state, alarm.timing)
                if next_due is not None and next_due <= now:
                    found.add(alarm_id)
        return found

    def in_flight(self, rows: Iterable[dict[str, Any]], alarm_ids: set[int]) -> Held:
        """The keys of `alarm_ids` that `rows` (a batch not evaluated yet) carry a message for,
        read by the alarm's own rule (the Python evaluator's, as the batch's pass has it);
        None for an alarm where a row's reading failed: all its keys wait for the batch."""
        held: Held = {a: set() for a in alarm_ids if a in self.alarms}
        by_tenant: dict[str, list[int]] = {}
        for alarm_id in held:
            by_tenant.setdefault(self.alarms[alarm_id].tenant, []).append(alarm_id)
        budget = default_budget(1)
        for row in rows:
            for alarm_id in by_tenant.get(row.get("tenant") or "", ()):
                keys = held[alarm_id]
                if keys is None:
                    continue
                try:
                    found = read(self._rule(alarm_id), row, budget)
                except Exception:
                    held[alarm_id] = None
                    continue
                if found is not None:
                    keys.add(storable_key(found.key))
        return held

    def _rule(self, alarm_id: int) -> CompiledRule:
        alarm = self.alarms[alarm_id]
        cached = self._compiled.get(alarm_id)
        if cached is None or cached[0] != alarm.version:
            cached = self._compiled[alarm_id] = (alarm.version, compile_alarm(alarm.spec))
        return cached[1]

    def tick(self, now: float, held: Held | None = None) -> int:
        """Fire the timers due by `now` (the time before which the feed has every message):
        only the keys whose next timer is due, from the heap, save the `held` ones (a batch
        read and not taken yet carries messages for them: they wait for it); every minute,
        forget the normal keys seen on no message for the alarm's `seen_days`."""
        count = 0
        due = self._due
        waiting = []
        while due and due[0][0] <= now:
            at, alarm_id, key = heapq.heappop(due)
            if self._scheduled.get((alarm_id, key)) != at:
                continue  # an entry the key no longer has (it was forgotten, or rescheduled)
            if held is not None and alarm_id in held:
                keys = held[alarm_id]
                if keys is None or key in keys:
                    waiting.append((at, alarm_id, key))
                    continue
            del self._scheduled[(alarm_id, key)]
            state, alarm = self.states.get((alarm_id, key)), self.alarms.get(alarm_id)
            if state is None or alarm is None:
                continue
            moved = machine.advance(key, state, alarm.timing, now)
            self._schedule(alarm, key, state)  # its next timer (or the same, moved later)
            if moved:
                self.changed.add((alarm_id, key))
                self.transitions += [(alarm_id, t) for t in moved]
                count += len(moved)
        for entry in waiting:
            heapq.heappush(due, entry)
        if time.time() - self._swept > 60:
            self.sweep(now)
        return count

    def sweep(self, now: float) -> None:
        """Forget the normal keys seen on no message for their alarm's `seen_days`."""
        self._swept = time.time()
        stale = []
        for (alarm_id, key), state in self.states.items():
            alarm, seen = self.alarms.get(alarm_id), state.last_seen
            if alarm is None or state.status != machine.NORMAL or seen is None:
                continue
            if now - seen > alarm.seen_days * 86_400:
                stale.append((alarm_id, key))
        for state_key in stale:
            del self.states[state_key]
            self.changed.discard(state_key)
            self.keys[self.alarms[state_key[0]].tenant] -= 1
            self.forgotten.append(state_key)

    # -- written down --------------------------------------------------------------------------

    def save(self, conn: psycopg.Connection) -> bool:
        """The changed states, their transitions and the position, in one transaction; the
        acknowledgements made since the last save, read back. False (all kept) when the
        database is away. A write every tenant's keys share: what Postgres would refuse was
        made storable when read (`take`); should it still fail, each key is written alone and
        only the one refused is left out (logged, counted in `REFUSED["alarm states"]`)."""
        if not (self.changed or self.forgotten or self.refused) and self.position == self.saved:
            self._read_acks(conn)
            return True
        keys = self._by_key()
        try:
            with conn.transaction(), conn.cursor() as cur:
                self._write_keys(cur, keys)
                self._write_rest(cur)
        except psycopg.Error as exc:
            if is_away(exc):
                log.warning("alarm states kept for the next save: %s", exc)
                return False
            log.warning("alarm states: a write of %d keys failed (%s): each alone", len(keys), exc)
            try:
                each_alone_sync("alarm states", keys, lambda one: self._write_alone(conn, one))
                with conn.transaction(), conn.cursor() as cur:
                    self._write_rest(cur)
            except psycopg.Error as again:
                log.warning("alarm states kept for the next save: %s", again)
                return False
        self.changed.clear()
        self.transitions.clear()
        self.forgotten.clear()
        self.refused.clear()
        self.saved = self.position
        self._read_acks(conn)
        return True

    def _by_key(self) -> list[tuple[tuple[int, str], list[Transition]]]:
        """What to write per key: its state (if kept) and its transitions, in order."""
        keys: dict[tuple[int, str], list[Transition]] = {k: [] for k in sorted(self.changed)}
        for alarm_id, transition in self.transitions:
            keys.setdefault((alarm_id, transition.key), []).append(transition)
        return list(keys.items())

    def _write_keys(
        self, cur: psycopg.Cursor[Any], keys: list[tuple[tuple[int, str], list[Transition]]]
    ) -> None:
        cur.executemany(_UPSERT, [self._row(k) for k, _ in keys if k in self.states])
        transitions = [(k[0], t) for k, moved in keys for t in moved]
        if transitions:
            self._write(cur, transitions)

    def _write_alone(
        self, conn: psycopg.Connection, one: tuple[tuple[int, str], list[Transition]]
    ) -> None:
        with conn.transaction(), conn.cursor() as cur:
            self._write_keys(cur, [one])

    def _write_rest(self, cur: psycopg.Cursor[Any]) -> None:
        cur.executemany(_FORGET, self.forgotten)
        count_refused(cur, "quota_alarm_keys", self.refused)
        if self.position is not None:
            cur.execute(_POSITION, (self.stream, self.position, self.position))

    def _row(self, state_key: tuple[int, str]) -> dict[str, Any]:
        state = self.states[state_key]
        active = state.status in (machine.ACTIVE, machine.ACKNOWLEDGED)
        return {
            "alarm": state_key[0],
            "key": state_key[1],
            "status": state.status,
            # a key that never changed state: since it was first seen (or watched)
            "since": _when(state.since or state.last_seen or time.time()),
            "value": _value(state.value),
            "cause": state.cause,
            "raised": _when(state.raised_at) if active else None,
            "cleared": _when(state.since)
            if state.status == machine.NORMAL and state.since
            else None,
            "machine": machine_json(state),
        }

    def _write(self, cur: psycopg.Cursor[Any], transitions: list[tuple[int, Transition]]) -> None:
        """The transitions, and their notifications in the outbox (`alarm_notices` sends them):
        pipelined, one round trip for all."""
        params = [self._transition(alarm_id, t) for alarm_id, t in transitions]
        cur.executemany(_TRANSITION, params, returning=True)
        notices = []
        for alarm_id, t in transitions:
            written = cur.fetchone()
            alarm = self.alarms.get(alarm_id)
            if written is not None and alarm is not None:  # else deleted meanwhile
                for index, target in alarm.notified(t.event):
                    notices.append((written[1], written[0], target.get("kind"), index,
                                    str(target.get("target", ""))))  # fmt: skip
            if not cur.nextset():
                break
        cur.executemany(_NOTIFICATION, notices)

    @staticmethod
    def _transition(alarm_id: int, t: Transition) -> tuple[Any, ...]:
        return (
            t.key, t.event, t.before, t.after, _when(t.at), _value(t.value), t.cause,
            t.message_id, alarm_id,
        )  # fmt: skip

    def _read_acks(self, conn: psycopg.Connection) -> None:
        if not self.alarms:
            return
        try:
            rows = conn.execute(_ACKED, (list(self.alarms), self._acked_since)).fetchall()
        except psycopg.Error as exc:
            log.warning("acknowledgements not read: %s", exc)
            return
        for alarm_id, key, at, by in rows:
            state, alarm = self.states.get((alarm_id, key)), self.alarms.get(alarm_id)
            if state is not None and alarm is not None:
                # the control plane wrote the acknowledgement's transition; timers due by then
                # are this job's to write
                moved = machine.acknowledge(key, state, alarm.timing, at.timestamp(), by or "")
                self._schedule(alarm, key, state)
                self.transitions += [(alarm_id, t) for t in moved if t.event != machine.ACKNOWLEDGE]
                self.changed.add((alarm_id, key))
            self._acked_since = max(self._acked_since, at)

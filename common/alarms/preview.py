"""An alarm tried over a range of a tenant's history before it is switched on: how many times it
would have raised, for which keys, how long each stayed active, and the first transitions.

The rows are the rule preview's (`common.rule_preview`: the tenant's archive of the range in
DuckDB, only the (event, topic) pairs the alarm's source takes, its own `$rules-…` republishes
left out), read in time order through the definition's rule (`definition.read`) and each key's
machine (`machine.message`) — the code the live job runs, so the transitions are the same for
the same messages. Keys for no data: the ones seen in the range (each watched from its first
message), and for `devices` the tenant's devices too, watched from the range's start. At the
range's end every key's timers up to then fire. Re-notifications are not transitions: left out.

Bounded by `seconds` of evaluation: past it the rest is counted in `unevaluated` and `complete`
is false.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from time import perf_counter
from typing import Any

import duckdb

from common.alarms import machine
from common.alarms.definition import AlarmSpec, compile_alarm, reading
from common.alarms.machine import KeyState, Timing, Transition
from common.rule_preview.preview import arrow_rows, considered_view, select_row
from common.rule_preview.scan import VIEW, PreviewTooLong, open_scan
from common.rules import default_budget

DEFAULT_LIMIT = 20
DEFAULT_SECONDS = 10.0
MAX_KEYS_SHOWN = 50


@dataclass
class KeySummary:
    key: str
    raised: int = 0
    active_seconds: float = 0.0  # in all, over the range (to its end for one still active)
    longest_seconds: float = 0.0
    state_at_end: str = machine.NORMAL


@dataclass
class AlarmPreview:
    read: int = 0  # the tenant's archived rows in the range
    considered: int = 0  # of those, what the alarm's source takes
    evaluated: int = 0
    failed: int = 0  # rows its expressions failed on (bad JSON): neither raise nor clear
    unevaluated: int = 0
    complete: bool = True
    raised: int = 0  # raise transitions, all keys
    keys_raised: int = 0
    keys: list[KeySummary] = field(default_factory=list)  # the most raised first
    transitions: list[dict[str, Any]] = field(default_factory=list)  # the first, in time order
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class _Run:
    """Each key's machine over rows in time order, with what the summary needs."""

    def __init__(self, spec: AlarmSpec) -> None:
        self.rule = compile_alarm(spec)
        self.timing = Timing(spec.raise_for, spec.clear_seconds, spec.no_data, None)
        self.budget = default_budget(1)
        self.states: dict[str, KeyState] = {}
        self.transitions: list[Transition] = []
        self.evaluated = self.failed = 0

    def state(self, key: str) -> KeyState:
        found = self.states.get(key)
        if found is None:
            found = self.states[key] = KeyState()
        return found

    def rows(self, rows: Iterable[dict[str, Any]], tenant: str, deadline: float) -> bool:
        """Read rows (in time order); False when the deadline stopped it first."""
        for row in rows:
            if perf_counter() >= deadline:
                return False
            row["tenant"] = tenant
            self.evaluated += 1
            result = self.rule.apply(row, self.budget)
            found = reading(result)
            if found is None:
                self.failed += result.error is not None
                continue
            at = row["ts"] / 1000.0
            self.transitions += machine.message(
                found.key,
                self.state(found.key),
                self.timing,
                at,
                found.raised,
                found.cleared,
                found.value,
            )
        return True

    def finish(self, end: float) -> None:
        for key, state in self.states.items():
            self.transitions += machine.advance(key, state, self.timing, end)
        self.transitions.sort(key=lambda t: t.at)


def _summary(run: _Run, end: float, result: AlarmPreview, limit: int) -> None:
    keys: dict[str, KeySummary] = {}
    active_from: dict[str, float] = {}
    for t in run.transitions:
        summary = keys.get(t.key) or keys.setdefault(t.key, KeySummary(t.key))
        if t.event == machine.RAISE:
            summary.raised += 1
            active_from[t.key] = t.at
        elif t.event == machine.CLEAR and t.key in active_from:
            _add_active(summary, t.at - active_from.pop(t.key))
    for key, since in active_from.items():
        _add_active(keys[key], end - since)
    for key, summary in keys.items():
        summary.state_at_end = run.states[key].status
    raised = [s for s in keys.values() if s.raised]
    raised.sort(key=lambda s: (-s.raised, -s.active_seconds, s.key))
    result.raised = sum(s.raised for s in raised)
    result.keys_raised = len(raised)
    result.keys = raised[:MAX_KEYS_SHOWN]
    result.transitions = [_transition(t) for t in run.transitions[:limit]]


def _add_active(summary: KeySummary, seconds: float) -> None:
    summary.active_seconds = round(summary.active_seconds + seconds, 3)
    summary.longest_seconds = round(max(summary.longest_seconds, seconds), 3)


def _transition(t: Transition) -> dict[str, Any]:
    return {
        "key": t.key,
        "event": t.event,
        "before": t.before,
        "after": t.after,
        "at": datetime.fromtimestamp(t.at, UTC).isoformat(timespec="milliseconds"),
        "value": t.value,
        "cause": t.cause,
    }


def preview(
    store: Any,
    tenant: str,
    spec: AlarmSpec,
    start: datetime,
    end: datetime,
    *,
    devices: Iterable[str] = (),
    limit: int = DEFAULT_LIMIT,
    seconds: float = DEFAULT_SECONDS,
    memory: str = "1GB",
) -> AlarmPreview:
    """The preview of the alarm `spec` over `tenant`'s archive in [start, end) (see the module).
    `devices`: keys watched for no data from `start` (the tenant's devices, for `devices`)."""
    started = perf_counter()
    run = _Run(spec)
    if spec.no_data is not None:
        for device in devices:
            machine.seed(run.state(device), start.timestamp())
    result = AlarmPreview()
    con = duckdb.connect()
    watchdog = threading.Timer(3 * seconds + 10, con.interrupt)
    watchdog.daemon = True
    watchdog.start()
    try:
        con.execute("SET TimeZone = 'UTC'")
        con.execute(f"SET memory_limit = '{memory}'")
        open_scan(con, store, tenant, start, end)
        pairs = con.execute(f"SELECT event, topic, count(*) FROM {VIEW} GROUP BY ALL").fetchall()
        result.read = sum(n for _, _, n in pairs)
        taken = [(e, t) for e, t, _ in pairs if run.rule.reads(e, t)]
        if taken:
            considered_view(con, taken, len(taken) == len(pairs), None)
            result.considered = con.execute("SELECT count(*) FROM considered").fetchall()[0][0]
            reader = con.sql(f"SELECT {select_row()} FROM considered ORDER BY ts")
            result.complete = run.rows(
                arrow_rows(reader.to_arrow_reader(4096)), tenant, started + seconds
            )
    except duckdb.InterruptException:
        raise PreviewTooLong(
            "the range holds more than a preview reads in its time: narrow it"
        ) from None
    finally:
        watchdog.cancel()
        con.close()
    finish = end.timestamp()
    if not result.complete:
        finish = max((s.clock for s in run.states.values()), default=start.timestamp())
    run.finish(finish)
    result.evaluated, result.failed = run.evaluated, run.failed
    result.unevaluated = result.considered - run.evaluated
    _summary(run, finish, result, limit)
    result.seconds = round(perf_counter() - started, 3)
    return result

"""An alarm tried over a range of a tenant's history before it is switched on: how many times it
would have raised, for which keys, how long each stayed active, and the first transitions.

The rows are the rule preview's (`common.rule_preview`: the tenant's archive of the range in
DuckDB, only the (event, topic) pairs the alarm's source takes, its own `$rules-…` republishes
left out), read in time order through the definition's rule (`definition.read`) and each key's
machine (`machine.message`) — the code the live job runs, so the transitions are the same for
the same messages. Keys for no data: the ones seen in the range (each watched from its first
message), and for `devices` the tenant's devices too, watched from the range's start. At the
range's end every key's timers up to then fire. Re-notifications are not transitions: left out.

Where the alarm reads each message's state from a raise condition DuckDB can decide exactly
(`common.rule_preview.native`: a key of `clientid`, the default clear), DuckDB answers it for
the rows it is sure of, in one ordered pass, and the evaluator only the rest; a transition's
value is then computed for the transitions shown only (by the message's place in that order).
Both ways give the same transitions (tests/alarms/test_preview.py runs both).

Bounded by `seconds` of evaluation: past it the rest is counted in `unevaluated` and `complete`
is false.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from time import perf_counter
from typing import Any

import duckdb
import pyarrow as pa

from common.alarms import machine
from common.alarms.definition import AlarmSpec, compile_alarm, reading
from common.alarms.machine import KeyState, Timing, Transition
from common.rule_preview import native as nat
from common.rule_preview.preview import (
    arrow_rows,
    considered_view,
    judged_sql,
    select_row,
    struct_row,
)
from common.rule_preview.scan import VIEW, PreviewTooLong, watched_scan
from common.rules import default_budget

log = logging.getLogger(__name__)

DEFAULT_LIMIT = 20
# A total order of the considered rows, alike in every pass over them (a message's place in it
# names it for its value, computed later).
ORDER = "ts, client_id, topic, hash(payload)"
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
        self.wants_value = bool(spec.value)
        # The native pass: a message's value is its place in ORDER until resolved (`values`).
        self.placed = False
        self.values: dict[int, Any] = {}
        self.seeded: tuple[list[str], float] = ([], 0.0)

    def seed(self, devices: Iterable[str], at: float) -> None:
        """Devices watched for no data from `at` (kept to seed them again on `reset`)."""
        self.seeded = (list(devices), at)
        for device in self.seeded[0]:
            machine.seed(self.state(device), at)

    def reset(self) -> None:
        """Back to before any row was read (the devices seeded again)."""
        self.states.clear()
        self.transitions.clear()
        self.evaluated = self.failed = 0
        self.placed = False
        self.values.clear()
        self.seed(*self.seeded)

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

    def native(
        self, con: duckdb.DuckDBPyConnection, rule: nat.NativeRule, tenant: str, deadline: float
    ) -> bool:
        """Read the considered rows in ORDER with DuckDB's answer where it is sure, the
        evaluator's elsewhere; False when the deadline stopped it first."""
        self.placed = self.wants_value
        judged = judged_sql(rule)
        query = (
            f"SELECT epoch_ms(ts) AS ms, client_id, _sure, _passes, "
            f"CASE WHEN NOT _sure THEN {struct_row()} END AS whole FROM ({judged}) ORDER BY {ORDER}"
        )
        place = -1
        for batch in con.sql(query).to_arrow_reader(65_536):
            if perf_counter() >= deadline:
                return False
            columns = batch.to_pydict()
            for ms, client, sure, passes, whole in zip(
                columns["ms"], columns["client_id"], columns["_sure"], columns["_passes"],
                columns["whole"], strict=True,
            ):  # fmt: skip
                place += 1
                self.evaluated += 1
                if sure:
                    if not client:
                        continue
                    key, raised, value = client, bool(passes), None
                else:
                    whole["tenant"] = tenant
                    result = self.rule.apply(whole, self.budget)
                    found = reading(result)
                    if found is None:
                        self.failed += result.error is not None
                        continue
                    key, raised, value = found.key, found.raised, found.value
                    if self.placed:
                        self.values[place] = value
                if self.placed:
                    value = place
                self.transitions += machine.message(
                    key, self.state(key), self.timing, ms / 1000.0, raised, not raised, value
                )
        return True

    def resolve(self, con: duckdb.DuckDBPyConnection, shown: list[Transition]) -> list[Transition]:
        """The shown transitions with their values (the native pass kept places)."""
        if not self.placed:
            return shown
        wanted = sorted({t.value for t in shown if t.value not in self.values})
        if wanted:
            con.register("_wanted", pa.table({"_n": pa.array(wanted, pa.int64())}))
            rows = (
                con.sql(
                    f"SELECT * FROM (SELECT {select_row()}, row_number() OVER (ORDER BY {ORDER}) - 1"
                    " AS _n FROM considered) WHERE _n IN (SELECT _n FROM _wanted)"
                )
                .to_arrow_table()
                .to_pylist()
            )
            for row in rows:
                found = reading(self.rule.apply(row, self.budget))
                self.values[row.pop("_n")] = found.value if found is not None else None
        return [replace(t, value=self.values.get(t.value)) for t in shown]

    def finish(self, end: float) -> None:
        for key, state in self.states.items():
            self.transitions += machine.advance(key, state, self.timing, end)
        self.transitions.sort(key=lambda t: t.at)


def _summary(
    run: _Run, end: float, result: AlarmPreview, limit: int, con: duckdb.DuckDBPyConnection
) -> None:
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
    result.transitions = [_transition(t) for t in run.resolve(con, run.transitions[:limit])]


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
        run.seed(devices, start.timestamp())
    result = AlarmPreview()
    try:
        with watched_scan(store, tenant, start, end, seconds=seconds, memory=memory) as con:
            pairs = con.execute(
                f"SELECT event, topic, count(*) FROM {VIEW} GROUP BY ALL"
            ).fetchall()
            result.read = sum(n for _, _, n in pairs)
            taken = [(e, t) for e, t, _ in pairs if run.rule.reads(e, t)]
            if taken:
                considered_view(con, taken, len(taken) == len(pairs), None)
                result.considered = con.execute("SELECT count(*) FROM considered").fetchall()[0][0]
                result.complete = _read(con, run, spec, tenant, started + seconds)
            finish = end.timestamp()
            if not result.complete:
                finish = max((s.clock for s in run.states.values()), default=start.timestamp())
            run.finish(finish)
            result.evaluated, result.failed = run.evaluated, run.failed
            result.unevaluated = result.considered - run.evaluated
            _summary(run, finish, result, limit, con)
    except duckdb.InterruptException:
        raise PreviewTooLong(
            "the range holds more than a preview reads in its time: narrow it"
        ) from None
    result.seconds = round(perf_counter() - started, 3)
    return result


def native_rule(spec: AlarmSpec) -> nat.NativeRule | None:
    """The raise condition as DuckDB decides it, where the alarm's reading is that alone (key
    `clientid`, the default clear); None otherwise."""
    if spec.key.strip() != "clientid" or spec.clear_condition or not spec.raise_condition:
        return None
    try:
        return nat.compile_native(
            f'SELECT clientid FROM "{spec.source}" WHERE ({spec.raise_condition})'
        )
    except nat.NotNative:
        return None
    except Exception:  # a gap in the translation costs time, never a result
        log.warning("alarm preview: no native form", exc_info=True)
        return None


def _read(
    con: duckdb.DuckDBPyConnection, run: _Run, spec: AlarmSpec, tenant: str, deadline: float
) -> bool:
    rule = native_rule(spec)
    if rule is not None:
        try:
            return run.native(con, rule, tenant, deadline)
        except (duckdb.InterruptException, duckdb.IOException):
            raise
        except duckdb.Error:
            log.warning(
                "alarm preview: the native pass failed; evaluating in Python", exc_info=True
            )
            run.reset()
    reader = con.sql(f"SELECT {select_row()} FROM considered ORDER BY {ORDER}")
    return run.rows(arrow_rows(reader.to_arrow_reader(4096)), tenant, deadline)

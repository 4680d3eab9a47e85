"""Rules that go over their budget: each such message a dead letter (bounded), and a rule that
keeps doing it paused, with a notice its tenant reads.

A message over its rule's budget (`common.rules.budget`: time, outputs, sizes) failed, and its
tenant should know which: up to `LETTERS_PER_BATCH` dead letters per rule and batch carry the
message's reference (topic, client id, timestamp) and the reason, one more says how many others
there were. Rows a tenant's rules could not evaluate because they used their share of the batch
(`plan.SHARE`) are one letter per rule and batch, with the time window a backfill re-runs.

A rule whose messages went over budget `pause_after` times or more in the last `window` seconds,
at least half of its evaluations there, is paused: `tenants_rule.paused_at` / `paused_reason`
(shown by the API and the portal), an audit entry `rule.paused`; it stops running until its
tenant saves or enables it again. Rows left out for the share never count towards a pause: they
are load, not the rule's fault.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from spark.rules.bookkeeping import DeadLetter
from spark.rules.plan import SHARE, RuleSpec

LETTERS_PER_BATCH = 10
PAUSE_AFTER_VARIABLE = "RULES_PAUSE_AFTER"
DEFAULT_PAUSE_AFTER = 10
BUDGET_ACTION = {"type": "budget"}  # a dead letter of the evaluation itself, not of an action


def pause_after() -> int:
    try:
        value = int(os.environ.get(PAUSE_AFTER_VARIABLE) or DEFAULT_PAUSE_AFTER)
    except ValueError:
        value = DEFAULT_PAUSE_AFTER
    return max(1, value)


@dataclass
class _Batch:
    over: dict[int, list] = field(default_factory=lambda: defaultdict(list))
    shared: dict[int, list] = field(default_factory=lambda: defaultdict(list))
    evaluated: dict[int, int] = field(default_factory=lambda: defaultdict(int))


class BudgetWatch:
    def __init__(self, after: int | None = None, window: float = 60.0) -> None:
        self.pause_after = after if after is not None else pause_after()
        self.window = window
        self.history: dict[int, deque[tuple[float, int, int]]] = defaultdict(deque)
        self.paused: set[int] = set()

    def batch(
        self,
        rows: Iterable,
        specs: Mapping[int, RuleSpec],
        also_evaluated: Mapping[int, int] | None = None,
    ) -> tuple[list[DeadLetter], dict[int, str]]:
        """(dead letters, rules to pause with their reason) for one batch's result rows;
        `also_evaluated`: per rule, evaluations of the batch not among `rows` (plain skipped
        results, counted: `spark.rules.results`)."""
        seen = _Batch()
        for rule_id, evaluated in (also_evaluated or {}).items():
            seen.evaluated[rule_id] += evaluated
        for row in rows:
            budget = getattr(row, "budget", None)
            seen.evaluated[row.rule_id] += 1
            if budget == SHARE:
                seen.shared[row.rule_id].append(row)
            elif budget is not None:
                seen.over[row.rule_id].append(row)
        letters: list[DeadLetter] = []
        for rule_id, over in seen.over.items():
            letters += _letters(rule_id, specs, over)
        for rule_id, left in seen.shared.items():
            letters += _share_letter(rule_id, specs, left)
        return letters, self._pauses(seen, specs)

    def _pauses(self, seen: _Batch, specs: Mapping[int, RuleSpec]) -> dict[int, str]:
        now = time.monotonic()
        pauses = {}
        for rule_id, evaluated in seen.evaluated.items():
            history = self.history[rule_id]
            history.append((now, len(seen.over.get(rule_id, ())), evaluated))
            while history and history[0][0] < now - self.window:
                history.popleft()
            over = sum(h[1] for h in history)
            total = sum(h[2] for h in history)
            if over >= self.pause_after and 2 * over >= total and rule_id not in self.paused:
                last = seen.over[rule_id][-1].error if seen.over.get(rule_id) else ""
                pauses[rule_id] = (
                    f"paused {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC: {over} of {total} "
                    f"messages in the last {self.window:g} s went over the rule's budget "
                    f"(last: {last}). Fix the rule and save or enable it to run it again."
                )
                self.paused.add(rule_id)
                history.clear()
        return pauses

    def serving(self, rule_ids: Iterable[int]) -> None:
        """The rules loaded now: a paused one among them runs again (its tenant saved or enabled
        it), so it may be paused again."""
        self.paused -= set(rule_ids)


def _letters(rule_id: int, specs: Mapping[int, RuleSpec], rows: list) -> list[DeadLetter]:
    spec = specs.get(rule_id)
    tenant = spec.tenant if spec else rows[0].tenant
    letters = [
        DeadLetter(rule_id, tenant, BUDGET_ACTION, _output(row), row.error or "", 1)
        for row in rows[:LETTERS_PER_BATCH]
    ]
    if len(rows) > LETTERS_PER_BATCH:
        more = len(rows) - LETTERS_PER_BATCH
        letters.append(
            DeadLetter(
                rule_id,
                tenant,
                BUDGET_ACTION,
                {"messages": more, **_window(rows[LETTERS_PER_BATCH:])},
                f"{more} more messages of this batch went over the rule's budget",
                1,
            )
        )
    return letters


def _share_letter(rule_id: int, specs: Mapping[int, RuleSpec], rows: list) -> list[DeadLetter]:
    spec = specs.get(rule_id)
    tenant = spec.tenant if spec else rows[0].tenant
    output = {"messages": len(rows), **_window(rows)}
    return [DeadLetter(rule_id, tenant, BUDGET_ACTION, output, rows[0].error or "", 1)]


def _output(row) -> dict:
    try:
        value = json.loads(row.outputs or "{}")
    except ValueError:
        value = {}
    return value if isinstance(value, dict) else {}


def _window(rows: list) -> dict:
    times = [row.ts for row in rows if row.ts is not None]
    if not times:
        return {}
    low, high = min(times), max(times)
    return {"from": _iso(low), "to": _iso(high)}


def _iso(value) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    return datetime.fromtimestamp(int(value) / 1000, UTC).isoformat()

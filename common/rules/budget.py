"""What one rule may spend on one message: time, outputs, and the size of what it builds.

Tenants write the rules, and the live job, the backfills and the dry run evaluate them in
processes every tenant shares, so no message may take more than a bounded share:

- **time**: `Budget.seconds` of evaluation per (rule, message), checked after every function
  call, arithmetic step and FOREACH element (each of them bounded in turn by the sizes below, so
  a check is never far away);
- **outputs**: at most `Budget.max_outputs` per message (FOREACH; the plan's `max_rule_outputs`
  in the jobs), together at most `MAX_OUTPUT_BYTES` of JSON, nested at most `MAX_DEPTH` deep;
- **sizes**: a string a rule builds holds at most `MAX_STRING` characters (functions that
  multiply their input, such as `pad`, `replace` or `join_to_string`, check before building),
  all of them together at most `MAX_BUILT`, an array at most `MAX_ITEMS` elements, an integer
  at most `MAX_INT_BITS` bits (literals too).

A rule over budget fails that message only, with `BudgetExceeded` (a `RuleRuntimeError`, so it
is counted and reported as every failure is); its `kind` says which budget.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from common.rules.errors import RuleRuntimeError

MAX_STRING = 4 << 20  # characters of one string a rule builds
MAX_ITEMS = 100_000  # elements of one array a rule builds
MAX_INT_BITS = 8192  # about 2,466 decimal digits (Python prints at most 4,300)
MAX_LITERAL_DIGITS = 2000  # an integer literal in the SQL
MAX_DEPTH = 100  # nesting of an output's maps and arrays
MAX_OUTPUT_BYTES = 8 << 20  # JSON of all the outputs of one message
MAX_BUILT = 64 << 20  # characters of all the strings one message's evaluation builds
DEFAULT_SECONDS = 0.2  # evaluation time of one rule on one message
DEFAULT_MAX_OUTPUTS = 100  # the plans' default `max_rule_outputs` (common/contracts/quota_keys.py)
SECONDS_VARIABLE = "RULES_BUDGET_SECONDS"


class BudgetExceeded(RuleRuntimeError):
    """A rule went over one of its budgets on one message; `kind` names it (time, outputs,
    output_size, size, string, memory, array, integer, depth)."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(f"rule exceeded its budget ({kind}): {message}")

    @classmethod
    def again(cls, kind: str, text: str) -> BudgetExceeded:
        """The error again from a result's (`RuleResult.budget`, `.error`)."""
        error = cls(kind, "")
        error.args = (text,)
        return error


@dataclass(frozen=True)
class Budget:
    seconds: float = DEFAULT_SECONDS
    max_outputs: int = DEFAULT_MAX_OUTPUTS


def default_budget(max_outputs: int | None = None) -> Budget:
    """The operator's time budget (`RULES_BUDGET_SECONDS`, default 0.2 s) with `max_outputs`."""
    try:
        seconds = float(os.environ.get(SECONDS_VARIABLE) or DEFAULT_SECONDS)
    except ValueError:
        seconds = DEFAULT_SECONDS
    return Budget(
        seconds=seconds if seconds > 0 else DEFAULT_SECONDS,
        max_outputs=DEFAULT_MAX_OUTPUTS if max_outputs is None else max(0, int(max_outputs)),
    )


def string_too_long(what: str, size: int) -> BudgetExceeded:
    return BudgetExceeded(
        "string", f"{what} would build {size:,} characters (at most {MAX_STRING:,})"
    )


def too_many_items(what: str) -> BudgetExceeded:
    return BudgetExceeded("array", f"{what} would build more than {MAX_ITEMS:,} elements")


class Meter:
    """One message's spending against a `Budget` (made by `CompiledRule.apply`)."""

    __slots__ = ("budget", "deadline", "outputs", "output_bytes", "built")

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.deadline = perf_counter() + budget.seconds
        self.outputs = 0
        self.output_bytes = 0
        self.built = 0  # characters of the strings built so far (they may all be held)

    def check(self, value: Any) -> Any:
        """After each step: still in time, and `value` (what the step built) within bounds."""
        if perf_counter() > self.deadline:
            raise BudgetExceeded(
                "time", f"evaluation took longer than {self.budget.seconds:g} s on one message"
            )
        kind = type(value)
        if kind is str:
            size = len(value)
            if size > 256:
                if size > MAX_STRING:
                    raise _too_big(value)
                self.built += size
                if self.built > MAX_BUILT:
                    raise BudgetExceeded(
                        "memory", f"more than {MAX_BUILT:,} characters built for one message"
                    )
        elif kind is list:
            if len(value) > MAX_ITEMS:
                raise _too_big(value)
        elif kind is int:
            if value.bit_length() > MAX_INT_BITS:
                raise _too_big(value)
        elif isinstance(value, (str, list, bytes)) and len(value) > MAX_STRING:
            raise _too_big(value)
        return value

    def output(self, value: Any) -> None:
        """One more output of this message: counted, sized and its nesting checked."""
        self.outputs += 1
        if self.outputs > self.budget.max_outputs:
            raise BudgetExceeded(
                "outputs",
                f"more than {self.budget.max_outputs} outputs for one message "
                "(the plan's max_rule_outputs)",
            )
        try:
            self.output_bytes += measure(value, MAX_OUTPUT_BYTES - self.output_bytes)
        except BudgetExceeded as exc:
            if exc.kind != "size":
                raise
            raise BudgetExceeded(
                "output_size", f"outputs of one message larger than {MAX_OUTPUT_BYTES:,} bytes"
            ) from None


def _too_big(value: Any) -> BudgetExceeded:
    if type(value) is int:
        return BudgetExceeded("integer", f"an integer of more than {MAX_INT_BITS} bits")
    if isinstance(value, list):
        return BudgetExceeded("array", f"an array of more than {MAX_ITEMS:,} elements")
    return string_too_long("a string", len(value))


_SCALARS = frozenset((int, float, bool, type(None)))


def measure(value: Any, limit: int = MAX_OUTPUT_BYTES) -> int:
    """About the size of `value` as JSON, without encoding it; raises BudgetExceeded as soon as
    it passes `limit` or nests deeper than MAX_DEPTH (iterative: no recursion to exhaust).
    Scalars are summed in place and only containers are stacked: a flat output costs one loop."""
    total = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        kind = type(item)
        if kind is dict or isinstance(item, dict):
            if depth >= MAX_DEPTH:
                raise _too_deep()
            total += 2
            for key, sub in item.items():
                total += (len(key) if type(key) is str else 8) + 4
                sub_kind = type(sub)
                if sub_kind is str:
                    total += len(sub)
                elif sub_kind not in _SCALARS:
                    stack.append((sub, depth + 1))
                else:
                    total += 8
        elif kind is list or kind is tuple or isinstance(item, (list, tuple)):
            if depth >= MAX_DEPTH:
                raise _too_deep()
            total += 2
            for sub in item:
                sub_kind = type(sub)
                if sub_kind is str:
                    total += len(sub) + 3
                elif sub_kind not in _SCALARS:
                    stack.append((sub, depth + 1))
                else:
                    total += 9
        elif isinstance(item, (str, bytes, bytearray)):
            total += len(item) + 2
        else:
            total += 8
        if total > limit:
            raise BudgetExceeded("size", f"a value larger than {limit:,} bytes as JSON")
    return total


def _too_deep() -> BudgetExceeded:
    return BudgetExceeded("depth", f"a value nested deeper than {MAX_DEPTH} levels")

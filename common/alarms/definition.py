"""An alarm's definition, checked and compiled into one rule of the rules' dialect.

An alarm watches a source (a topic filter, or a `$events/…` lifecycle source) and keeps a state
per key (the client id by default, or any expression of the dialect, e.g. `payload.site`). Its
conditions are expressions of the dialect (`payload.temp > 90`), so an alarm reads a message
exactly as a rule's WHERE would — the dry run's, the preview's and the Spark jobs' semantics.

The definition compiles into one rule,

    SELECT (key) AS alarm_key, (raise) AS alarm_raised, (clear) AS alarm_cleared,
           (value) AS alarm_value FROM "source"

whose output for each message is a `Reading` the state machine (`machine.py`) takes. Each
expression is checked alone first (one expression, nothing around it), so no text of one can
reach into another's place or the rule's FROM.

Defaults: the key is `clientid`; the clear condition is the raise condition's negation (a
message on the source that does not raise counts toward clearing); the clear condition's
duration is the raise's; the value is the raise condition's first field read, else null.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from common.archive.schema import EVENT_TOPICS
from common.rules import CompiledRule, RuleResult, RuleSyntaxError, compile_rule
from common.rules.budget import Budget
from common.rules.functions import ARITIES
from common.rules.parser import parse
from common.rules.topics import topic_filter_problem
from common.stores.postgres_text import storable_text

SEVERITIES = ("critical", "major", "minor", "warning", "info")
NOTIFY_ON = ("raise", "acknowledge", "clear")
NOTIFY_KINDS = ("webhook", "email", "republish")
MAX_SECONDS = 7 * 86_400  # the longest `for`, clear duration or no-data window: a week
MIN_NO_DATA_SECONDS = 10
NO_DATA_KEYS = ("devices", "seen")  # the tenant's devices, or the keys seen in the last days
MAX_EXPRESSION_CHARS = 1_000


class AlarmDefinitionError(ValueError):
    """A definition that cannot run: `field` names the part, the message says what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True, slots=True)
class AlarmSpec:
    """What the state machine and the rule need of a definition (durations in seconds)."""

    source: str
    raise_condition: str = ""  # empty: the alarm raises only for no data
    key: str = "clientid"
    clear_condition: str = ""  # empty: NOT (raise_condition)
    raise_for: float = 0.0
    clear_for: float | None = None  # None: raise_for
    no_data: float | None = None  # seconds without a message that raise; None: never
    value: str = ""  # the value shown with a transition; empty: null

    @property
    def clear_seconds(self) -> float:
        return self.raise_for if self.clear_for is None else self.clear_for


@dataclass(frozen=True, slots=True)
class Reading:
    """One message as an alarm reads it."""

    key: str
    raised: bool
    cleared: bool
    value: Any


def _expression(field: str, text: str) -> str:
    """`text` if it is one expression of the dialect, else AlarmDefinitionError."""
    if not isinstance(text, str) or not text.strip():
        raise AlarmDefinitionError(field, "is empty")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise AlarmDefinitionError(field, f"is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        statement = parse(f'SELECT ({text}) AS alarm_x FROM "alarm/check"', ARITIES)
    except RuleSyntaxError as exc:
        problem = f"is not an expression of the rules' dialect: {exc.message}"
        raise AlarmDefinitionError(field, problem) from None
    if len(statement.fields) != 1 or statement.where is not None or statement.foreach:
        raise AlarmDefinitionError(field, "must be one expression (e.g. payload.temp > 90)")
    return text.strip()


def _source(source: str) -> str:
    if not isinstance(source, str) or not source:
        raise AlarmDefinitionError("source", "is empty: give a topic filter or a $events source")
    if source.startswith("$events/"):
        if source not in EVENT_TOPICS:
            known = ", ".join(sorted(EVENT_TOPICS))
            raise AlarmDefinitionError("source", f"{source!r} is not a lifecycle source ({known})")
        return source
    if '"' in source:
        raise AlarmDefinitionError("source", "a topic filter has no double quote")
    problem = topic_filter_problem(source)
    if problem:
        raise AlarmDefinitionError("source", problem)
    return source


def _seconds(field: str, value: float | None, low: float = 0.0) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise AlarmDefinitionError(field, "must be a number of seconds")
    if not low <= value <= MAX_SECONDS:
        raise AlarmDefinitionError(field, f"must be from {low:g} to {MAX_SECONDS} seconds")


def check(spec: AlarmSpec) -> AlarmSpec:
    """The spec, every part checked (AlarmDefinitionError names the first bad one)."""
    _source(spec.source)
    if not spec.raise_condition and spec.no_data is None:
        raise AlarmDefinitionError(
            "raise_condition", "give a raise condition, a no-data window, or both"
        )
    if spec.raise_condition:
        _expression("raise_condition", spec.raise_condition)
    elif spec.clear_condition:
        raise AlarmDefinitionError("clear_condition", "needs a raise condition")
    _expression("key", spec.key)
    if spec.clear_condition:
        _expression("clear_condition", spec.clear_condition)
    if spec.value:
        _expression("value", spec.value)
    _seconds("raise_for", spec.raise_for)
    _seconds("clear_for", spec.clear_for)
    _seconds("no_data", spec.no_data, MIN_NO_DATA_SECONDS)
    compile_alarm(spec)  # the whole, as the jobs will run it
    return spec


def alarm_sql(spec: AlarmSpec) -> str:
    """The one rule that reads a message for this alarm."""
    raised = f"({spec.raise_condition})" if spec.raise_condition else "false"
    if spec.clear_condition:
        cleared = f"({spec.clear_condition})"
    elif spec.raise_condition:
        cleared = f"NOT ({spec.raise_condition})"
    else:
        cleared = "true"  # a no-data alarm clears with any message
    value = f"({spec.value})" if spec.value else "null"
    return (
        f"SELECT ({spec.key}) AS alarm_key, {raised} AS alarm_raised, "
        f'{cleared} AS alarm_cleared, {value} AS alarm_value FROM "{spec.source}"'
    )


def compile_alarm(spec: AlarmSpec) -> CompiledRule:
    try:
        return compile_rule(alarm_sql(spec))
    except RuleSyntaxError as exc:
        raise AlarmDefinitionError("definition", exc.message) from None


def read(rule: CompiledRule, row: dict[str, Any], budget: Budget | None = None) -> Reading | None:
    """What `row` (an archive row) says to the alarm (see `reading`)."""
    return reading(rule.apply(row, budget))


def reading(result: RuleResult) -> Reading | None:
    """The alarm's rule's result for a row as a Reading: None when the source does not take the
    row, it has no key, or the expressions failed on it (bad JSON: it neither raises nor clears)."""
    if not result.matched or not result.outputs:
        return None
    out = result.outputs[0]
    key = out.get("alarm_key")
    if key is None or key == "":
        return None
    return Reading(
        key if isinstance(key, str) else str(key),
        out.get("alarm_raised") is True,
        out.get("alarm_cleared") is True,
        out.get("alarm_value"),
    )


MAX_KEY = 255  # what `tenants_alarmstate.key` holds


def storable_key(key: str) -> str:
    """A key as the tables hold it: NUL and lone surrogates escaped; a longer one cut, with a
    digest of the whole so two long keys stay two."""
    key = storable_text(key)
    if len(key) <= MAX_KEY:
        return key
    return f"{key[: MAX_KEY - 17]}…{hashlib.sha256(key.encode()).hexdigest()[:16]}"

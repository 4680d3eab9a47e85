"""AST -> Python closures, once per rule; `CompiledRule.apply` runs them on one archive row.

No AST is walked per row: every node becomes a closure `fn(env) -> value` at compile time
(`expressions`, with `operators` and `paths`), constants are folded, and a variable that SELECT
never assigns reads the row's column directly. This module puts a statement together: FROM's
filter, the output fields (`fields`), WHERE, FOREACH / INCASE / DO, the budget and the errors of
one message, and which archive columns it reads (`projection`). The semantics are EMQX's
(emqx_rule_runtime / emqx_rule_maps): see docs/rules.md.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from common.archive.schema import EVENT_PUBLISH, EVENT_TOPICS
from common.rules import functions as funcs
from common.rules.budget import Budget, BudgetExceeded, Meter, default_budget
from common.rules.columns import Env
from common.rules.errors import RuleRuntimeError
from common.rules.expressions import _Compiler
from common.rules.fields import (
    _assigned_names,
    _compile_fields,
    _field_target,
    _make_put,
    _run_fields,
)
from common.rules.parser import parse
from common.rules.projection import columns_read
from common.rules.topics import topic_match
from common.rules.values import jsonable


class RuleResult:
    """What one rule made of one row: `matched` when FROM and WHERE held; `outputs` the rows it
    produced (one for SELECT, 0..n for FOREACH); `error` when evaluation failed (then `matched`
    is False and `outputs` empty).

    EMQX's per-rule metrics map onto it as: matched = `CompiledRule.reads(event, topic)` (FROM
    took the row), passed = `result.matched`, failed = `result.error is not None`; `budget` names
    the budget a failure went over (`common.rules.budget`), if that was the cause."""

    __slots__ = ("matched", "outputs", "error", "budget")

    def __init__(
        self,
        matched: bool,
        outputs: list[dict[str, Any]] | None = None,
        error: str | None = None,
        budget: str | None = None,
    ):
        self.matched = matched
        self.outputs = [] if outputs is None else outputs
        self.error = error
        self.budget = budget

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RuleResult):
            return NotImplemented
        return (self.matched, self.outputs, self.error) == (
            other.matched,
            other.outputs,
            other.error,
        )

    def __repr__(self) -> str:
        return (
            f"RuleResult(matched={self.matched!r}, outputs={self.outputs!r}, error={self.error!r})"
        )


@dataclass(frozen=True, eq=False)
class CompiledRule:
    """A rule compiled once; `apply` evaluates it on archive rows (thread-safe, no state)."""

    sql: str
    sources: tuple[str, ...]
    topic_filters: tuple[str, ...]
    events: tuple[str, ...]
    foreach: bool
    # Archive columns evaluation may read (FROM's `event`/`topic` always): a reader may prune the
    # rest (Parquet column projection). Derived from the AST, so it is exact or a superset.
    archive_columns: tuple[str, ...]
    _apply: Callable[[Mapping[str, Any], Meter, str | None], RuleResult] = field(repr=False)

    def reads(self, event: str, topic: str | None) -> bool:
        """Does FROM take this archive row (`event` as in the archive, its topic)?"""
        if event == EVENT_PUBLISH or event is None:
            if topic is None:
                return False
            return any(topic_match(topic, f) for f in self.topic_filters)
        return event in self.events

    def apply(
        self, row: Mapping[str, Any], budget: Budget | None = None, rule_id: str | None = None
    ) -> RuleResult:
        """Evaluate on one row. FROM is checked here too: a row FROM does not take is no match.
        `row` is a mapping of archive columns (a pyspark Row is taken through `asDict()`).
        `budget` bounds what this message may cost (`common.rules.budget`; the operator's
        default when None): over it, the result is a failure whose `budget` names it.
        `rule_id` is what `metadata.rule_id` gives (EMQX's rule id: here the rule's name)."""
        if type(row) is not dict and not isinstance(row, Mapping):
            # A pyspark Row (a tuple): common/ does not import pyspark to name its type.
            row = row.asDict()  # type: ignore[unreachable]
        return self._apply(row, Meter(budget if budget is not None else _default()), rule_id)

    def __reduce__(self):
        # Pickled as its SQL (Spark ships rules to executors): recompiled there, never closures.
        return (compile_rule, (self.sql,))


def compile_rule(sql: str) -> CompiledRule:
    """Compile rule SQL; raise RuleSyntaxError (with .line/.column) when it is not a rule."""
    statement = parse(sql, funcs.ARITIES)
    sources = tuple(statement.sources)
    topic_filters = tuple(s for s in sources if not s.startswith("$events/"))
    # `$events/…` sources name lifecycle events; one the archive has no rows for takes nothing.
    events = tuple(dict.fromkeys(EVENT_TOPICS[s] for s in sources if s in EVENT_TOPICS))
    assigned = _assigned_names(statement)
    compiler = _Compiler(assigned, output_first=True)
    conditions = _Compiler(assigned)
    where = conditions.cond(statement.where) if statement.where is not None else None
    event_set = frozenset(events)
    filters = topic_filters
    exact = frozenset(f for f in filters if "+" not in f and "#" not in f)
    wild = tuple(f for f in filters if f not in exact)

    seen: dict[str, bool] = {}  # topic -> taken; topics repeat, matching them need not

    def takes(row: Mapping[str, Any]) -> bool:
        event = row.get("event")
        if event is None or event == EVENT_PUBLISH:
            topic = row.get("topic")
            if topic is None:
                return False
            known = seen.get(topic)
            if known is None:
                known = topic in exact or any(topic_match(topic, f) for f in wild)
                if len(seen) >= 10_000:
                    seen.clear()
                seen[topic] = known
            return known
        return event in event_set

    if not statement.foreach:
        fields_c = _compile_fields(statement.fields, compiler)

        steps = [(value_fn, put, getattr(put, "key", None)) for value_fn, put in fields_c]

        def apply_select(row: Mapping[str, Any], meter: Meter, rule_id: str | None) -> RuleResult:
            if not takes(row):
                return RuleResult(False)
            env = Env(row, meter, rule_id)
            selected: dict[str, Any] = {}
            env.selected = selected  # later fields and WHERE see what is selected
            try:
                for value_fn, put, key in steps:
                    if value_fn is None:
                        selected.update(env.all_columns())
                    elif key is not None:
                        selected[key] = value_fn(env)
                    else:
                        put(env, selected, value_fn(env))
                if where is not None and not where(env):
                    return RuleResult(False)
                meter.output(selected)
                return RuleResult(True, [jsonable(selected)])
            except BudgetExceeded as exc:
                return RuleResult(False, [], str(exc), exc.kind)
            except RuleRuntimeError as exc:
                return RuleResult(False, [], str(exc))
            except Exception as exc:  # a failing message never stops the job
                return _unexpected(exc)

        apply = apply_select
    else:
        apply = _compile_foreach(statement, compiler, conditions, where, takes)
    return CompiledRule(
        sql=sql,
        sources=sources,
        topic_filters=topic_filters,
        events=events,
        foreach=statement.foreach,
        archive_columns=columns_read(statement),
        _apply=apply,
    )


def _compile_foreach(statement, compiler, conditions, where, takes):
    fields = statement.fields
    *leading, last = fields
    if last[0] == "star":
        from common.rules.errors import RuleSyntaxError

        raise RuleSyntaxError("FOREACH needs an expression that gives an array, not *")
    leading_c = _compile_fields(leading, compiler)
    _, last_expr, last_alias, last_text = last
    if last_alias is not None and len(last_alias) > 1:
        from common.rules.errors import RuleSyntaxError

        raise RuleSyntaxError("the array of FOREACH takes a plain name after AS, e.g. AS s")
    coll_key = last_alias[0][1] if last_alias is not None else "item"
    coll_fn = compiler.expr(last_expr)
    coll_put = _make_put(_field_target(last_expr, last_alias, last_text, compiler))
    coll_is_payload = last_expr[0] == "var" and last_expr[1] == "payload" and not last_expr[2]
    leading_puts = [
        (value_fn, put, item) for (value_fn, put), item in zip(leading_c, leading, strict=True)
    ]
    incase = conditions.cond(statement.incase) if statement.incase is not None else None
    do_c = _compile_fields(statement.do, compiler) if statement.do else None

    def apply_foreach(row: Mapping[str, Any], meter: Meter, rule_id: str | None) -> RuleResult:
        if not takes(row):
            return RuleResult(False)
        env = Env(row, meter, rule_id)
        try:
            selected: dict[str, Any] = {}
            env.selected = selected
            for value_fn, put, item in leading_puts:
                if value_fn is None:
                    selected.update(env.all_columns())
                    continue
                value = value_fn(env)
                put(env, selected, value)
                if item[2] is not None:  # AS names are visible to what follows
                    put(env, env.cols, value)
            collection = coll_fn(env)
            coll_put(env, selected, collection)
            if coll_is_payload and isinstance(collection, str):
                collection = env.payload_json()
            if not isinstance(collection, list):
                collection = []
            if where is not None and not where(env):
                return RuleResult(False)
            base = {**env.all_columns(), **selected} if do_c is None else None
            item_cols = {**env.cols, **selected}
            outputs = []
            for element in collection:
                meter.check(None)  # each element is a step: still in time
                item_env = Env(row, meter)
                cols = item_cols.copy()
                cols[coll_key] = element
                item_env.cols = cols
                item_env._json = env._json
                if incase is not None and not incase(item_env):
                    continue
                output = (
                    {**base, coll_key: element}  # type: ignore[dict-item]  # set when no DO
                    if do_c is None
                    else _run_fields(do_c, item_env, {})
                )
                meter.output(output)
                outputs.append(jsonable(output))
            return RuleResult(True, outputs)
        except BudgetExceeded as exc:
            return RuleResult(False, [], str(exc), exc.kind)
        except RuleRuntimeError as exc:
            return RuleResult(False, [], str(exc))
        except Exception as exc:  # a failing message never stops the job
            return _unexpected(exc)

    return apply_foreach


def _unexpected(exc: Exception) -> RuleResult:
    if isinstance(exc, RecursionError):  # a payload nested beyond what Python can walk
        error = BudgetExceeded("depth", "a value nested deeper than Python can walk")
        return RuleResult(False, [], str(error), "depth")
    if isinstance(exc, MemoryError):
        error = BudgetExceeded("memory", "evaluation ran out of memory")
        return RuleResult(False, [], str(error), "memory")
    return RuleResult(False, [], f"evaluation failed: {exc}")


_DEFAULT_BUDGET: list[Budget] = []


def _default() -> Budget:
    """The operator's default budget, read from the environment once per process."""
    if not _DEFAULT_BUDGET:
        _DEFAULT_BUDGET.append(default_budget())
    return _DEFAULT_BUDGET[0]

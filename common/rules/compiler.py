"""AST -> Python closures, once per rule; `CompiledRule.apply` runs them on one archive row.

No AST is walked per row: every node becomes a closure `fn(env) -> value` at compile time,
constants are folded, and a variable that SELECT never assigns reads the row's column directly.
The semantics are EMQX's (emqx_rule_runtime / emqx_rule_maps): see docs/rules.md.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from common.archive.schema import ARCHIVE_COLUMNS, EVENT_PUBLISH, EVENT_TOPICS
from common.rules import functions as funcs
from common.rules.budget import Budget, BudgetExceeded, Meter, default_budget
from common.rules.columns import Env
from common.rules.errors import RuleRuntimeError
from common.rules.parser import Statement, parse
from common.rules.topics import topic_match
from common.rules.values import (
    compare_eq,
    compare_ge,
    compare_gt,
    compare_le,
    compare_lt,
    compare_ne,
    is_number,
    jsonable,
    loads,
    term_equal,
    to_str,
)

Fn = Callable[[Env], Any]


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


# -- path get / put (emqx_rule_maps) ---------------------------------------------------------


def _decode_if_text(data: Any) -> Any:
    """A string met on a path is read as JSON when it is JSON (EMQX's general_find)."""
    if isinstance(data, str):
        try:
            return loads(data)
        except ValueError:
            return None
    return data


def _getnth(index: Any, items: list[Any]) -> Any:
    if type(index) is not int or index == 0:
        return None
    if index > 0:
        return items[index - 1] if index <= len(items) else None
    return items[index] if -index <= len(items) else None


def _get_key(data: Any, key: str) -> Any:
    if isinstance(data, dict):
        return data.get(key)
    if isinstance(data, str):
        data = _decode_if_text(data)
        if isinstance(data, dict):
            return data.get(key)
    return None


def _get_index(data: Any, index: Any) -> Any:
    if isinstance(data, str):
        data = _decode_if_text(data)
    if isinstance(data, list):
        return _getnth(index, data)
    return None


def _range_index(index: Any, length: int) -> int:
    if type(index) is not int:
        raise RuleRuntimeError(f"a range bound must be an integer, got {to_str(index)}")
    if index == 0:
        raise RuleRuntimeError("a range bound cannot be 0: indexes start at 1")
    return index if index > 0 else length + index + 1


def _get_range(data: Any, begin: Any, end: Any) -> list[Any]:
    if isinstance(data, str):
        data = _decode_if_text(data)
    if not isinstance(data, list):
        raise RuleRuntimeError("a range [a..b] needs an array")
    first = _range_index(begin, len(data))
    last = _range_index(end, len(data))
    if first < 1:
        first = 1
    return data[first - 1 : max(first - 1, last)]


def _setnth(index: Any, items: Any, value: Any) -> list[Any]:
    if not isinstance(items, list):
        return [value]
    if index == "head":
        return [value, *items]
    if index == "tail":
        return [*items, value]
    if type(index) is not int or index == 0:
        return items
    position = index - 1 if index > 0 else len(items) + index
    if 0 <= position < len(items):
        copy = list(items)
        copy[position] = value
        return copy
    return items


def _put(path: list[tuple[Any, ...]], value: Any, data: Any) -> Any:
    """Copy-on-write nested put: containers on the path are copied, the rest shared."""
    if not path:
        return value
    kind, key = path[0][0], path[0][1] if len(path[0]) > 1 else None
    if kind == "key":
        sub = _get_key(data, key)  # type: ignore[arg-type]  # a "key" step has its key
        base = dict(data) if isinstance(data, dict) else {}
        base[key] = _put(path[1:], value, sub)
        return base
    if kind in ("head", "tail"):
        return _setnth(kind, data, _put(path[1:], value, None))
    sub = _get_index(data, key) if isinstance(data, list) else None
    return _setnth(key, data, _put(path[1:], value, sub))


# -- expressions ---------------------------------------------------------------------------

_COMPARE = {
    "=": compare_eq,
    "!=": compare_ne,
    "<>": compare_ne,
    "<": compare_lt,
    "<=": compare_le,
    ">": compare_gt,
    ">=": compare_ge,
}


def _topic_cmp(topic: Any, topic_filter: Any) -> bool:
    if topic is None or topic_filter is None:
        return False
    return topic_match(to_str(topic), to_str(topic_filter))


def _strict_equal(a: Any, b: Any) -> bool:
    """Erlang's =:= (IN, CASE x WHEN, contains): 1 is not 1.0, '1' is not 1."""
    if type(a) is not type(b) and not (isinstance(a, str) and isinstance(b, str)):
        return False
    return term_equal(a, b)


def _add(x: Any, y: Any) -> Any:
    if is_number(x) and is_number(y):
        return x + y
    if isinstance(x, str) or isinstance(y, str):
        return to_str(x) + to_str(y)
    raise RuleRuntimeError(f"cannot add {to_str(x)} and {to_str(y)}")


def _numbers(op: str, x: Any, y: Any) -> None:
    if not (is_number(x) and is_number(y)):
        raise RuleRuntimeError(f"'{op}' needs numbers, got {to_str(x)} and {to_str(y)}")


def _sub(x, y):
    _numbers("-", x, y)
    return x - y


def _mul(x, y):
    _numbers("*", x, y)
    return x * y


def _div(x, y):
    _numbers("/", x, y)
    if y == 0:
        raise RuleRuntimeError("division by zero")
    return x / y


def _intdiv(x, y):
    if type(x) is not int or type(y) is not int:
        raise RuleRuntimeError(f"'div' needs integers, got {to_str(x)} and {to_str(y)}")
    if y == 0:
        raise RuleRuntimeError("division by zero")
    quotient = abs(x) // abs(y)
    return quotient if (x >= 0) == (y >= 0) else -quotient  # truncates toward zero


def _mod(x, y):
    if type(x) is not int or type(y) is not int:
        raise RuleRuntimeError(f"'mod' needs integers, got {to_str(x)} and {to_str(y)}")
    if y == 0:
        raise RuleRuntimeError("division by zero")
    rest = abs(x) % abs(y)
    return rest if x >= 0 else -rest  # Erlang rem: the sign of the dividend


_FAST_NUMERIC = {
    "=": operator.eq,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "!=": operator.ne,
    "<>": operator.ne,
}

_ARITH = {"+": _add, "-": _sub, "*": _mul, "/": _div, "div": _intdiv, "mod": _mod}


class _Compiler:
    """Compiles expressions. Fields (SELECT, FOREACH, DO) and conditions (WHERE, INCASE) read
    paths differently in EMQX: a field reads the output so far, then the message
    (`output_first`); a condition reads the message merged with the output, where a selected
    name hides the message's."""

    def __init__(self, assigned: set[str], output_first: bool = False):
        self.assigned = assigned  # top-level names SELECT/DO/FOREACH may bind
        self.output_first = output_first

    def expr(self, node: tuple[Any, ...]) -> Fn:
        fn: Fn = getattr(self, "_" + node[0])(node)
        return fn

    def cond(self, node: tuple[Any, ...]) -> Callable[[Env], bool]:
        """A condition (WHERE, INCASE, WHEN): holds only when it evaluates to true."""
        fn = self.expr(node)
        return lambda env: fn(env) is True

    def _const(self, node):
        value = node[1]
        return lambda env: value

    def _list(self, node):
        items = [self.expr(item) for item in node[1]]
        return lambda env: [item(env) for item in items]

    def _range(self, node):
        low, high = self.expr(node[1]), self.expr(node[2])

        def gen(env):
            a, b = low(env), high(env)
            if type(a) is not int or type(b) is not int:
                raise RuleRuntimeError("a range [a..b] needs integer bounds")
            if b - a > 100_000:
                raise RuleRuntimeError("a range [a..b] may hold at most 100000 items")
            return env.meter.check(list(range(a, b + 1)))

        return gen

    def _neg(self, node):
        inner = self.expr(node[1])

        def neg(env):
            value = inner(env)
            if not is_number(value):
                raise RuleRuntimeError(f"cannot negate {to_str(value)}")
            return -value

        return neg

    def _arith(self, node):
        op, left, right = _ARITH[node[1]], self.expr(node[2]), self.expr(node[3])
        return lambda env: env.meter.check(op(left(env), right(env)))

    def _cmp(self, node):
        left, right = self.expr(node[2]), self.expr(node[3])
        if node[1] == "=~":
            return lambda env: _topic_cmp(left(env), right(env))
        op = _COMPARE[node[1]]
        const = node[3][1] if node[3][0] == "const" else None
        if is_number(const) and node[1] in _FAST_NUMERIC:
            fast = _FAST_NUMERIC[node[1]]

            def compare_number(env):
                value = left(env)
                kind = type(value)
                if kind is int or kind is float:
                    return fast(value, const)  # type: ignore[arg-type]  # a number: checked
                return op(value, const)

            return compare_number
        return lambda env: op(left(env), right(env))

    def _and(self, node):
        left, right = self.cond(node[1]), self.cond(node[2])
        return lambda env: left(env) and right(env)

    def _or(self, node):
        left, right = self.cond(node[1]), self.cond(node[2])
        return lambda env: left(env) or right(env)

    def _not(self, node):
        inner = self.expr(node[1])

        def negate(env):
            value = inner(env)
            return (not value) if isinstance(value, bool) else False

        return negate

    def _in(self, node):
        value, items, negated = self.expr(node[1]), [self.expr(i) for i in node[2]], node[3]

        def member(env):
            v = value(env)
            found = any(_strict_equal(v, item(env)) for item in items)
            return not found if negated else found

        return member

    def _case(self, node):
        on = self.expr(node[1]) if node[1] is not None else None
        whens = [
            (self.expr(w) if on is not None else self.cond(w), self.expr(t)) for w, t in node[2]
        ]
        otherwise = self.expr(node[3]) if node[3] is not None else (lambda env: None)
        if on is None:

            def case(env):
                for when, then in whens:
                    if when(env):
                        return then(env)
                return otherwise(env)

            return case

        def switch(env):
            subject = on(env)
            for when, then in whens:
                if _strict_equal(subject, when(env)):
                    return then(env)
            return otherwise(env)

        return switch

    def _fun(self, node):
        # Every call is a budget check: still in time, and what it built within bounds.
        name, args = node[1], [self.expr(a) for a in node[2]]
        fn = funcs.FUNCTIONS[name]
        if name in funcs.CONTEXT_FUNCTIONS:
            return lambda env: env.meter.check(fn(env, *[a(env) for a in args]))
        if len(args) == 1:
            (only,) = args
            return lambda env: env.meter.check(fn(only(env)))
        if len(args) == 2:
            first, second = args
            return lambda env: env.meter.check(fn(first(env), second(env)))
        return lambda env: env.meter.check(fn(*[a(env) for a in args]))

    # -- variables and paths -----------------------------------------------------------------
    def root(self, name: str) -> Fn:
        """The value a name starts from: what SELECT built (when it may have), else the row."""
        if name == "payload":
            return self._payload_root(decode=False)
        if name in self.assigned:

            def lookup(env):
                value = env.selected.get(name)
                return value if value is not None else env.column(name)

            return lookup
        return lambda env: env.column(name)

    def _payload_root(self, decode: bool) -> Fn:
        assigned = "payload" in self.assigned
        if not decode:
            if assigned:
                return lambda env: (
                    env.selected.get("payload")
                    if env.selected.get("payload") is not None
                    else env.column("payload")
                )
            return lambda env: env.column("payload")

        def decoded(env):
            if assigned:
                value = env.selected.get("payload")
                if value is not None and value is not env.cols.get("payload"):
                    if isinstance(value, str):
                        from common.rules.columns import decode_json

                        return decode_json(value, "payload")
                    return value
            return env.payload_json()

        return decoded

    def segments(self, segs: list[tuple[Any, ...]]) -> list[tuple[str, Any]]:
        out = []
        for seg in segs:
            if seg[0] == "key":
                out.append(("key", seg[1]))
            elif seg[0] == "index":
                index = seg[1]
                if index[0] == "const":
                    out.append(("index", index[1]))
                else:
                    out.append(("index_fn", self.expr(index)))
            else:
                out.append(("range", (self.expr(seg[1]), self.expr(seg[2]))))
        return out

    def _var(self, node):
        name, segs = node[1], node[2]
        if not segs:
            return self.root(name)
        steps = self.segments(segs)
        if self.output_first and name in self.assigned:
            return self._output_then_message(name, steps)
        root = self._payload_root(decode=True) if name == "payload" else self.root(name)
        return _walker(root, steps)

    def _output_then_message(self, name: str, steps: list[Any]) -> Fn:
        """A path in a SELECT, DO or FOREACH field whose name the fields may bind: EMQX reads it
        in the output built so far, and in the message when the whole path is missing there
        (emqx_rule_runtime: `eval(Field, [Action, Columns])`), so `SELECT payload.a, payload.b`
        gives both. A range applies to what the path found, wherever it was found."""
        cut = next((i for i, (kind, _) in enumerate(steps) if kind == "range"), len(steps))
        path, rest = steps[:cut], steps[cut:]
        if name == "payload":

            def output(env):
                value = env.selected.get("payload")
                if value is None:
                    return None
                if value is env.cols.get("payload"):  # the message's own: decoded once
                    return env.payload_json()
                if isinstance(value, str):
                    from common.rules.columns import decode_json

                    return decode_json(value, "payload")
                return value

            def message(env):
                return env.payload_json()
        else:

            def output(env):
                return env.selected.get(name)

            def message(env):
                return env.column(name)

        in_output, in_message = _walker(output, path), _walker(message, path)

        def found(env):
            value = in_output(env)
            return value if value is not None else in_message(env)

        return _walker(found, rest) if rest else found


def _walker(root: Fn, steps: list[Any]) -> Fn:
    """`root`'s value followed along `steps` (keys, indexes, a range): missing is None."""
    if not steps:
        return root
    if all(kind == "key" for kind, _ in steps):
        keys = [key for _, key in steps]
        if len(keys) == 1:
            (key,) = keys

            def get1(env):
                data = root(env)
                if type(data) is dict:
                    return data.get(key)
                return _get_key(data, key)

            return get1

        def get_keys(env):
            data = root(env)
            for key in keys:
                data = data.get(key) if type(data) is dict else _get_key(data, key)
                if data is None:
                    return None
            return data

        return get_keys

    def walk(env):
        data = root(env)
        for kind, arg in steps:
            if data is None and kind != "range":
                return None
            if kind == "key":
                data = _get_key(data, arg)
            elif kind == "index":
                data = _get_index(data, arg)
            elif kind == "index_fn":
                data = _get_index(data, arg(env))
            else:
                data = _get_range(data, arg[0](env), arg[1](env))
        return data

    return walk


# -- statement -------------------------------------------------------------------------------


def _assigned_names(statement: Statement) -> set[str]:
    names: set[str] = set()
    for item in [*statement.fields, *statement.do]:
        if item[0] == "star":
            continue
        _, expr, alias, _text = item
        if alias is not None:
            names.add(alias[0][1])
        elif expr[0] == "var":
            names.add(expr[1])
    if statement.foreach:
        names.add("item")
    return names


def _field_target(expr: tuple[Any, ...], alias: list[Any] | None, text: str, compiler: _Compiler):
    """Where an output field goes: ("key", name) or ("path", head, [segment fns])."""
    if alias is not None:
        if len(alias) == 1:
            return ("key", alias[0][1])
        return (
            "path",
            alias[0][1],
            [(seg[0], seg[1] if len(seg) > 1 else None) for seg in alias[1:]],
        )
    if expr[0] == "var":
        name, segs = expr[1], expr[2]
        if segs and segs[-1][0] == "range":
            segs = segs[:-1]
        if not segs:
            return ("key", name)
        out = []
        for seg in segs:
            if seg[0] == "key":
                out.append(("key", seg[1]))
            elif seg[1][0] == "const":
                out.append(("index", seg[1][1]))
            else:
                out.append(("index_fn", compiler.expr(seg[1])))
        return ("path", name, out)
    if expr[0] == "const" and isinstance(expr[1], str):
        return ("key", expr[1])
    return ("key", text)


def _make_put(target) -> Callable[[Env, dict[str, Any], Any], None]:
    if target[0] == "key":
        key = target[1]

        def put_key(env, into, value):
            into[key] = value

        put_key.key = key  # type: ignore[attr-defined]  # lets SELECT assign plain names without a call
        return put_key
    head, segs = target[1], target[2]

    def put_path(env, into, value):
        path = [(("index", arg(env)) if kind == "index_fn" else (kind, arg)) for kind, arg in segs]
        current = into.get(head)
        if head == "payload" and isinstance(current, str):
            from common.rules.columns import decode_json

            current = decode_json(current, "payload")
        into[head] = _put(path, value, current)

    return put_path


def _compile_fields(items: list[Any], compiler: _Compiler):
    """[(value fn | None for *, put fn | None)] in SELECT order."""
    compiled: list[tuple[Fn | None, Callable[[Env, dict[str, Any], Any], None] | None]] = []
    for item in items:
        if item[0] == "star":
            compiled.append((None, None))
            continue
        _, expr, alias, text = item
        compiled.append(
            (compiler.expr(expr), _make_put(_field_target(expr, alias, text, compiler)))
        )
    return compiled


def _run_fields(compiled, env: Env, into: dict[str, Any]) -> dict[str, Any]:
    selected_before = env.selected
    env.selected = into
    try:
        for value_fn, put in compiled:
            if value_fn is None:
                into.update(env.all_columns())
            else:
                put(env, into, value_fn(env))
    finally:
        env.selected = selected_before
    return into


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


# -- which archive columns a rule reads ------------------------------------------------------

_PUB_PROPS = (
    "user_properties",
    "payload_format",
    "content_type",
    "message_expiry",
    "response_topic",
    "correlation_data",
)
# Rule column (or context function) -> the archive columns it is computed from.
COLUMN_SOURCES: dict[str, tuple[str, ...]] = {
    "event": ("event",),
    "id": ("ts", "client_id", "topic", "payload"),
    "msgid": ("ts", "client_id", "topic", "payload"),
    "clientid": ("client_id",),
    "username": ("username",),
    "topic": ("topic",),
    "qos": ("qos",),
    "payload": ("payload",),
    "flags": ("retain",),
    "flag": ("retain",),
    "retain": ("retain",),
    "timestamp": ("ts",),
    "publish_received_at": ("ts",),
    "connected_at": ("ts",),
    "disconnected_at": ("ts",),
    "peerhost": ("peer",),
    "clientip": ("peer",),
    "peername": ("peer",),
    "pub_props": _PUB_PROPS,
    "user_properties": ("user_properties",),
    "payload_format": ("payload_format",),
    "content_type": ("content_type",),
    "message_expiry": ("message_expiry",),
    "response_topic": ("response_topic",),
    "reason": ("reason",),
    "proto_ver": ("proto_ver",),
    "keepalive": ("keepalive",),
    "clean_start": ("clean_start",),
    "expiry_interval": ("session_expiry",),
}


def columns_read(statement: Statement) -> tuple[str, ...]:
    """The archive columns evaluating `statement` may touch, in the archive's order."""
    needed = {"event", "topic"}  # FROM
    everything = False

    def visit(node: Any) -> None:
        nonlocal everything
        if isinstance(node, tuple) and node:
            kind = node[0]
            if kind == "star":
                everything = True
                return
            if kind == "var":
                needed.update(COLUMN_SOURCES.get(node[1], ()))
            elif kind == "fun" and node[1] in funcs.CONTEXT_FUNCTIONS:
                needed.update(COLUMN_SOURCES.get(node[1], ()))
            for child in node[1:]:
                visit(child)
        elif isinstance(node, list):
            for child in node:
                visit(child)

    for part in (statement.fields, statement.do, statement.incase, statement.where):
        visit(part)
    if statement.foreach and not statement.do:
        everything = True  # each output carries every column
    if everything:
        return ARCHIVE_COLUMNS
    return tuple(column for column in ARCHIVE_COLUMNS if column in needed)

"""Expressions -> closures `fn(env) -> value`, once per rule (`_Compiler`): constants, operators,
CASE, IN, function calls (each a budget check) and variables with their paths. A variable that
SELECT never assigns reads the row's column directly; one it may assign reads what SELECT built
first. Fields and conditions read paths differently, as in EMQX (see `_Compiler`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common.rules import functions as funcs
from common.rules.columns import Env
from common.rules.errors import RuleRuntimeError
from common.rules.operators import _ARITH, _COMPARE, _FAST_NUMERIC, _strict_equal, _topic_cmp
from common.rules.paths import _get_index, _get_key, _get_range
from common.rules.values import is_number, to_str

Fn = Callable[[Env], Any]


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

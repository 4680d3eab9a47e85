"""The output fields of SELECT, FOREACH and DO: which names they may bind (`_assigned_names`,
which tells the expression compiler where a name is read), where each field's value goes (a
plain key, or a path for `AS a.b[1]`), and running them in order, each seeing the fields before
it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from common.rules.columns import Env
from common.rules.expressions import Fn, _Compiler
from common.rules.parser import Statement
from common.rules.paths import _put


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

"""The registry of the rule SQL's built-in functions, and what every family of them shares.

`_register` records a function under its SQL name(s) in `FUNCTIONS`, with the arity its Python
signature gives in `ARITIES` (what the parser checks calls against); a function that reads the
message itself (`topic()`, `clientid()`, ...) is registered with `context=True`, lands in
`CONTEXT_FUNCTIONS`, and gets the row first. The argument checks (`_num`, `_int`, `_text`) raise
`_bad(...)`, a RuleRuntimeError: the message counts as failed, as in EMQX
(`bad_sql_function_argument`). Functions whose result can be many times their input (pad,
replace, join, ...) check its size before building it (`common.rules.budget.MAX_STRING`); the
evaluator checks every other result after each call. `_get_path` is the dotted path into JSON
that `payload('a.b')` and `map_get` follow.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from common.rules.errors import RuleRuntimeError
from common.rules.values import is_number, json_encode, loads

MAX_BUILT_STRING = 1 << 20  # pad/sprintf widths: a rule cannot ask for gigabytes

FUNCTIONS: dict[str, Callable[..., Any]] = {}
CONTEXT_FUNCTIONS: set[str] = set()
ARITIES: dict[str, tuple[int, int | None]] = {}


def _register(*names: str, context: bool = False):
    def wrap(fn):
        sig = inspect.signature(fn)
        params = list(sig.parameters.values())
        if context:
            params = params[1:]
        low = sum(
            1
            for p in params
            if p.default is inspect.Parameter.empty and p.kind is not p.VAR_POSITIONAL
        )
        high = None if any(p.kind is p.VAR_POSITIONAL for p in params) else len(params)
        for name in names or (fn.__name__.rstrip("_"),):
            FUNCTIONS[name] = fn
            ARITIES[name] = (low, high)
            if context:
                CONTEXT_FUNCTIONS.add(name)
        return fn

    return wrap


def _bad(name: str, *args: Any) -> RuleRuntimeError:
    shown = ", ".join(_show(a) for a in args)
    return RuleRuntimeError(f"bad argument to {name}({shown})")


def _show(value: Any) -> str:
    text = json_encode(value) if not isinstance(value, str) else repr(str.__str__(value))
    return text if len(text) <= 60 else text[:57] + "..."


def _num(name: str, *values: Any) -> None:
    for value in values:
        if not is_number(value):
            raise _bad(name, *values)


def _int(name: str, *values: Any) -> None:
    for value in values:
        if type(value) is not int:
            raise _bad(name, *values)


def _text(name: str, value: Any, *rest: Any) -> str:
    """A string argument; EMQX passes atoms (true/false) as their names and rejects null."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    raise _bad(name, value, *rest)


def _get_path(data: Any, dotted: str, default: Any = None) -> Any:
    """`data` along the map keys of `dotted` (JSON text read as JSON on the way); else `default`."""
    for key in dotted.split("."):
        if isinstance(data, str):
            try:
                data = loads(data)
            except ValueError:
                return default
        if not isinstance(data, dict) or key not in data:
            return default
        data = data[key]
    return data

"""`sprintf` and `sprintf_s`: Erlang's io_lib:format for the `~` directives rules use, with field
widths bounded (MAX_BUILT_STRING) and the result's size checked as it is built.
"""

from __future__ import annotations

import re
from typing import Any

from common.rules.budget import MAX_STRING, string_too_long
from common.rules.errors import RuleRuntimeError
from common.rules.functions.registry import MAX_BUILT_STRING, _bad, _int, _register, _text
from common.rules.values import is_number, to_str


def _sprintf(fmt: str, args: list[Any]) -> str:
    """Erlang io_lib:format for the directives rules use: ~s ~ts ~p ~w ~d ~f ~e ~g ~b ~x ~X
    ~c ~n ~~ (with optional field width and precision, e.g. ~.2f, ~5d)."""
    out, i, used, built = [], 0, 0, len(fmt)
    pattern = re.compile(r"~(-?\d*)(?:\.(\d*))?(?:\.(.))?(t?)([sSpPwWdfeEgGbBxXcni~])")
    for match in pattern.finditer(fmt):
        out.append(fmt[i : match.start()])
        i = match.end()
        width, precision, _pad_char, _t, kind = match.groups()
        if kind == "~":
            out.append("~")
            continue
        if kind == "n":
            out.append("\n")
            continue
        if used >= len(args):
            raise RuleRuntimeError("sprintf: fewer arguments than ~ directives")
        arg = args[used]
        used += 1
        if kind == "i":
            continue
        if kind in "sS":
            text = to_str(arg)
        elif kind in "pPwW":
            text = _erlang_term(arg)
        elif kind == "d":
            if type(arg) is not int:
                raise _bad("sprintf", fmt, arg)
            text = str(arg)
        elif kind in "feEgG":
            if not is_number(arg):
                raise _bad("sprintf", fmt, arg)
            digits = min(int(precision), 100) if precision else 6
            text = format(float(arg), f".{digits}{'e' if kind in 'eE' else kind.lower()}")
        elif kind in "bB":
            _int("sprintf", arg)
            text = format(arg, "b")
        elif kind in "xX":
            _int("sprintf", arg)
            text = format(arg, "x" if kind == "x" else "X")
        elif kind == "c":
            _int("sprintf", arg)
            text = chr(arg)
        else:
            text = to_str(arg)
        if width:
            size = int(width)
            if abs(size) > MAX_BUILT_STRING:
                raise RuleRuntimeError(f"sprintf: field width above {MAX_BUILT_STRING}")
            text = text.rjust(size) if size > 0 else text.ljust(-size)
        out.append(text)
        built += len(text)
        if built > MAX_STRING:
            raise string_too_long("sprintf", built)
    out.append(fmt[i:])
    if used != len(args):
        raise RuleRuntimeError("sprintf: more arguments than ~ directives")
    return "".join(out)


def _erlang_term(value: Any) -> str:
    if isinstance(value, str):
        return '<<"' + value.replace('"', '\\"') + '">>'
    if value is None:
        return "undefined"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ",".join(_erlang_term(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ",".join(f"{_erlang_term(k)} => {_erlang_term(v)}" for k, v in value.items())
        return "#{" + inner + "}"
    return to_str(value)


@_register("sprintf")
def _sprintf_fn(fmt, *args):
    return _sprintf(_text("sprintf", fmt), list(args))


@_register("sprintf_s")
def _sprintf_s(fmt, args):
    if not isinstance(args, list):
        raise _bad("sprintf_s", fmt, args)
    return _sprintf(_text("sprintf_s", fmt), args)

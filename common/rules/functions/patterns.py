"""Regular expressions (`regex_match`, `regex_replace`, `regex_extract`). Tenants write them, so
they must never block a worker: patterns run on the `regex` module (PCRE-like, as Erlang's `re`)
with a time limit per call (REGEX_TIMEOUT_S), and input and pattern lengths are bounded; a call
that hits a limit fails that message only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import regex

from common.rules.budget import MAX_STRING, string_too_long
from common.rules.errors import RuleRuntimeError
from common.rules.functions.registry import _register, _text
from common.rules.values import to_str

REGEX_TIMEOUT_S = 0.05
REGEX_MAX_INPUT = 1 << 20
REGEX_MAX_PATTERN = 1000


@functools.lru_cache(maxsize=512)
def _compile_regex(pattern: str):
    if len(pattern) > REGEX_MAX_PATTERN:
        raise RuleRuntimeError(f"regular expression longer than {REGEX_MAX_PATTERN} characters")
    try:
        return regex.compile(pattern, regex.V0)
    except regex.error as exc:
        raise RuleRuntimeError(f"invalid regular expression {pattern!r}: {exc}") from None


def _regex_call(name: str, fn: Callable[[], Any], s: str):
    if len(s) > REGEX_MAX_INPUT:
        raise RuleRuntimeError(f"{name}: input longer than {REGEX_MAX_INPUT} characters")
    try:
        return fn()
    except TimeoutError:
        raise RuleRuntimeError(
            f"{name}: the regular expression took longer than {REGEX_TIMEOUT_S * 1000:.0f} ms"
        ) from None


@_register("regex_match")
def _regex_match(s, pattern):
    s = _text("regex_match", s, pattern)
    compiled = _compile_regex(to_str(pattern))
    return _regex_call(
        "regex_match", lambda: compiled.search(s, timeout=REGEX_TIMEOUT_S) is not None, s
    )


def _erlang_replacement(template: str) -> Callable[[Any], str]:
    """Erlang re:replace's replacement: `&` or `\\0` the whole match, `\\N` group N, `\\&` a
    literal ampersand."""
    parts: list[str | int] = []
    i = 0
    literal: list[str] = []
    while i < len(template):
        char = template[i]
        if char == "\\" and i + 1 < len(template):
            nxt = template[i + 1]
            if nxt.isdigit():
                j = i + 1
                while j < len(template) and template[j].isdigit():
                    j += 1
                parts.append("".join(literal))
                literal = []
                parts.append(int(template[i + 1 : j]))
                i = j
                continue
            literal.append(nxt)
            i += 2
            continue
        if char == "&":
            parts.append("".join(literal))
            literal = []
            parts.append(0)
        else:
            literal.append(char)
        i += 1
    parts.append("".join(literal))

    def expand(match) -> str:
        out = []
        for part in parts:
            if isinstance(part, int):
                try:
                    out.append(match.group(part) or "")
                except IndexError:
                    out.append("")
            else:
                out.append(part)
        return "".join(out)

    return expand


@_register("regex_replace")
def _regex_replace(s, pattern, replacement):
    s = _text("regex_replace", s, pattern, replacement)
    compiled = _compile_regex(to_str(pattern))
    expand = _erlang_replacement(to_str(replacement))
    grown = [len(s)]

    def bounded(match):  # what the replacements add, checked as they are made
        text = expand(match)
        grown[0] += len(text) - (match.end() - match.start())
        if grown[0] > MAX_STRING:
            raise string_too_long("regex_replace", grown[0])
        return text

    return _regex_call(
        "regex_replace", lambda: compiled.sub(bounded, s, timeout=REGEX_TIMEOUT_S), s
    )


@_register("regex_extract")
def _regex_extract(s, pattern):
    s = _text("regex_extract", s, pattern)
    compiled = _compile_regex(to_str(pattern))
    match = _regex_call("regex_extract", lambda: compiled.search(s, timeout=REGEX_TIMEOUT_S), s)
    if match is None:
        return []
    return [g if g is not None else "" for g in match.groups()]

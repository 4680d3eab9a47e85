"""A rule's WHERE as DuckDB SQL, with per row a condition saying where that SQL is exact.

The preview of a run over history counts what a rule matches in a day of a tenant's messages
within seconds, which the Python evaluator (`CompiledRule.apply`, ~40,000 rows/s per core) cannot.
So, as `spark/rules/native.py` does for Spark, the parts of a rule with an exact DuckDB
equivalent are compiled here, each with a "sure" condition; rows where it holds are decided by
DuckDB, the others (and every row of a rule that does not compile) go to the evaluator. A gap
here costs time, never a result: `tests/rules/test_preview_native.py` runs the Spark suite's
rules × payloads through both and asserts the same counts.

What compiles (anything else leaves the rule to Python): FROM of topic filters (which rows it
takes is decided in Python per distinct topic, not here); SELECT of `*`, plain payload paths and
bare columns (they cannot fail but for an unreadable payload, and the names they bind must not be
read by WHERE); WHERE with AND / OR / NOT (left-to-right, as the evaluator short-circuits), the
comparisons, `topic =~ 'filter'`, `x [NOT] IN (literals)`, TRUE/FALSE, between a payload path, the
payload, `topic`, `clientid`, `username`, `qos`, `timestamp` or `publish_received_at` and
literals, and one of those values as a condition (`WHERE payload.open`). EMQX's semantics as
`spark/rules/native.py` documents them.

Where DuckDB's JSON reader and Python's differ, a row is not sure: a payload that is not UTF-8 or
not JSON to DuckDB; a trailing comma (DuckDB takes it, Python refuses it); a `\\u` escape, or a
key of the rule's paths appearing twice (Python keeps the last duplicate, DuckDB the first); more
than 500 brackets (Python's parser recurses, and the outputs' depth is budgeted); a payload of
1 MiB or more (the outputs' size budget); a number that is not finite or not below 2^53 (DuckDB
reads large integers as doubles); a path through a JSON string (EMQX decodes it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from common.rules.topics import topic_filter_problem, topic_filter_regex
from common.rules.values import parse_number

EXACT = 2**53
MAX_BRACKETS = 500
MAX_PAYLOAD = 1 << 20
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!=", "<>": "<>"}
_OPS = {"=": "=", "!=": "<>", "<>": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_INT_TEXT = r"[+-]?[0-9]{1,15}"  # an Erlang integer below 2^53
_FLOAT_TEXT = r"[+-]?[0-9]+\.[0-9]+([eE][+-]?[0-9]+)?"  # an Erlang float
# Rule columns with a direct archive equivalent: (kind, SQL over the scanned rows).
_COLUMNS = {
    "topic": ("str", "topic"),
    "clientid": ("str", "client_id"),
    "username": ("str", "username"),
    "qos": ("int", "CAST(qos AS BIGINT)"),
    "timestamp": ("int", "epoch_ms(ts)"),
    "publish_received_at": ("int", "epoch_ms(ts)"),
}
_NUMBER_TYPES = "('BIGINT', 'UBIGINT', 'DOUBLE', 'HUGEINT')"
_UNICODE_ESCAPE = "'\\u'"  # SQL: the two characters backslash, u
_TRAILING_COMMA = r"',\s*[\]}]'"  # SQL: an RE2 pattern
TEXT = "_t"  # the payload as text (NULL when not UTF-8)
VALUES = "_v"  # the JSON values at the rule's paths (one parse), NULL when not JSON
OK = "_ok"  # the payload is JSON that DuckDB and Python read alike


class NotNative(Exception):
    """This rule (or a part of it) has no exact DuckDB equivalent here: Python evaluates it."""


def literal(text: str) -> str:
    """A SQL string literal (standard quoting: no backslash escapes in DuckDB)."""
    if "\x00" in text:
        raise NotNative("a NUL in a literal")
    return "'" + text.replace("'", "''") + "'"


def _number(value: int | float) -> str:
    number = float(value)
    if not math.isfinite(number):
        raise NotNative("a literal that is not a finite number")
    return f"CAST({number!r} AS DOUBLE)"


@dataclass
class Cond:
    value: str  # meaningful where `sure`
    sure: str


@dataclass
class Value:
    """ "json" (a payload path: `index` into the stage), "str", "int" (a column; NULL is EMQX's
    missing) or "payload" (the payload's text)."""

    kind: str
    sql: str = ""
    index: int = 0


@dataclass
class Stage:
    """The payload paths the rule reads (one JSON parse per row for all of them) and the
    per-path columns the conditions share."""

    paths: dict[tuple[Any, ...], int] = field(
        default_factory=dict
    )  # segments -> 1-based list index
    keys: set[str] = field(default_factory=set)
    reads_payload: bool = False  # the payload's text or JSON

    def path(self, segments: tuple[Any, ...]) -> int:
        self.reads_payload = True
        index = self.paths.get(segments)
        if index is None:
            index = self.paths[segments] = len(self.paths) + 1
            self.keys.update(arg for kind, arg in segments if kind == "key")
        return index

    def json_path(self, segments: tuple[Any, ...]) -> str:
        out = "$"
        for kind, arg in segments:
            if kind == "key":
                out += '."' + arg + '"'
            elif arg > 0:
                out += f"[{arg - 1}]"
            else:
                out += f"[#{arg}]"
        return out

    # -- the columns, in layers: each computed once per row ------------------------------------
    def extraction(self) -> str:
        """Layer 1: `_v`, the values at every path, in one parse."""
        if not self.paths:
            return f"NULL AS {VALUES}"
        paths = ", ".join(literal(self.json_path(s)) for s in self.paths)
        return f"try(json_extract({TEXT}, [{paths}])) AS {VALUES}"

    def hazards(self) -> str:
        """Layer 2: `_ok`, and per path `_j{i}` (JSON), `_y{i}` (its type). `_ok` is a CASE,
        each test run only on the rows the previous ones let through (DuckDB evaluates both
        sides of an OR on every row): the cheap tests first."""
        tests = [
            f"{VALUES} IS NULL",
            f"strlen({TEXT}) >= {MAX_PAYLOAD}",
            f"contains({TEXT}, {_UNICODE_ESCAPE})",
        ]
        tests += [f"{TEXT} LIKE {literal(_like_twice(k))} ESCAPE '\\'" for k in sorted(self.keys)]
        tests.append(f"regexp_matches({TEXT}, {_TRAILING_COMMA})")
        tests.append(
            f"CASE WHEN strlen({TEXT}) < {MAX_BRACKETS} THEN false "
            f"ELSE strlen({TEXT}) - strlen(translate({TEXT}, '[{{', '')) >= {MAX_BRACKETS} END"
        )
        ok = (
            "CASE "
            + " ".join(f"WHEN {test} THEN false" for test in tests)
            + f" ELSE true END AS {OK}"
        )
        columns = [ok]
        for i in self.paths.values():
            columns.append(f"{VALUES}[{i}] AS _j{i}")
            columns.append(f"json_type({VALUES}[{i}]) AS _y{i}")
        return ", ".join(columns)

    def values(self) -> str:
        """Layer 3: per path `_x{i}` (its double), `_s{i}` (its text), `_m{i}` (missing is
        sure: no ancestor, nor the payload itself, is a JSON string EMQX would decode)."""
        columns = []
        root_string = (
            f"coalesce(ltrim({TEXT}, ' ' || chr(9) || chr(10) || chr(13))[1] = '\"', true)"
        )
        for segments, i in self.paths.items():
            columns.append(
                f"CASE WHEN _y{i} IN {_NUMBER_TYPES} THEN TRY_CAST(_j{i} AS DOUBLE) END AS _x{i}"
            )
            columns.append(
                f"CASE WHEN _y{i} = 'VARCHAR' THEN json_extract_string(_j{i}, '$') END AS _s{i}"
            )
            through = [root_string]
            for depth in range(1, len(segments)):
                ancestor = literal(self.json_path(segments[:depth]))
                through.append(f"coalesce(json_type({TEXT}, {ancestor}) = 'VARCHAR', false)")
            columns.append(
                f"CASE WHEN _j{i} IS NOT NULL THEN true WHEN {VALUES} IS NULL THEN false "
                f"ELSE NOT ({' OR '.join(through)}) END AS _m{i}"
            )
        return ", ".join(columns) if columns else "NULL AS _none"


class _Leaf:
    def __init__(self, i: int) -> None:
        self.j, self.y, self.x, self.s, self.missing_sure = (
            f"_j{i}",
            f"_y{i}",
            f"_x{i}",
            f"_s{i}",
            f"_m{i}",
        )
        self.is_string = f"({self.y} = 'VARCHAR')"
        self.is_atom = f"({self.y} IN ('BOOLEAN', 'NULL'))"
        self.is_container = f"({self.y} IN ('OBJECT', 'ARRAY'))"
        self.is_number = f"({self.y} IN {_NUMBER_TYPES})"
        self.py_int = f"({self.y} IN ('BIGINT', 'UBIGINT', 'HUGEINT'))"
        self.py_float = f"({self.y} = 'DOUBLE')"
        # Exact as a double: finite and below 2^53 (a large integer reads as a DOUBLE here)
        self.number_sure = (
            f"coalesce(isfinite({self.x}) AND abs({self.x}) < {float(EXACT)!r}, false)"
        )
        self.atom_text = f"CAST({self.j} AS VARCHAR)"


def _segments(node: tuple[Any, ...]) -> tuple[Any, ...]:
    out = []
    for seg in node[2]:
        if seg[0] == "key":
            key = seg[1]
            if not key or any(c in key for c in '"\\/') or any(ord(c) < 32 for c in key):
                raise NotNative("a key DuckDB's paths cannot quote")
            out.append(("key", key))
        elif seg[0] == "index" and seg[1][0] == "const" and type(seg[1][1]) is int and seg[1][1]:
            out.append(("index", seg[1][1]))
        else:
            raise NotNative("a computed index or a range")
    return tuple(out)


class RuleCompiler:
    def __init__(self, stage: Stage, bound: set[str]) -> None:
        self.stage = stage
        self.bound = bound

    def value(self, node: tuple[Any, ...]) -> Value:
        if node[0] != "var":
            raise NotNative(f"{node[0]} is evaluated in Python")
        name = node[1]
        if name in self.bound:
            raise NotNative(f"{name} is bound by the SELECT")
        if name == "payload":
            if not node[2]:
                self.stage.reads_payload = True
                return Value("payload", TEXT)
            return Value("json", index=self.stage.path(_segments(node)))
        if node[2] or name not in _COLUMNS:
            raise NotNative(f"column {name}")
        kind, sql = _COLUMNS[name]
        return Value(kind, sql)

    def cond(self, node: tuple[Any, ...]) -> Cond:
        kind = node[0]
        if kind == "and":
            a, b = self.cond(node[1]), self.cond(node[2])
            return Cond(
                f"(CASE WHEN {a.value} THEN {b.value} ELSE false END)",
                f"({a.sure} AND CASE WHEN {a.value} THEN {b.sure} ELSE true END)",
            )
        if kind == "or":
            a, b = self.cond(node[1]), self.cond(node[2])
            return Cond(
                f"(CASE WHEN {a.value} THEN true ELSE {b.value} END)",
                f"({a.sure} AND CASE WHEN {a.value} THEN true ELSE {b.sure} END)",
            )
        if kind == "var":
            return self.atom(node, True)
        if kind == "not" and node[1][0] == "var":  # not a value: true only where it is false
            return self.atom(node[1], False)
        if kind == "not":  # of a condition: always a boolean
            inner = self.cond(node[1])
            return Cond(f"(NOT {inner.value})", inner.sure)
        if kind == "const" and isinstance(node[1], bool):
            return Cond("true" if node[1] else "false", "true")
        if kind == "cmp":
            return self.compare(node)
        if kind == "in":
            return self.member(node)
        raise NotNative(f"{kind} as a condition")

    def atom(self, node: tuple[Any, ...], wanted: bool) -> Cond:
        """A value as a condition (`WHERE payload.open`): it holds only where the value is the
        atom true (the evaluator's `is True`); under NOT, only where it is the atom false."""
        value = self.value(node)
        if value.kind != "json":  # a column or the payload's text: never a boolean
            return Cond("false", "true")
        leaf = _Leaf(value.index)
        holds = f"({leaf.is_atom} AND {leaf.atom_text} = '{'true' if wanted else 'false'}')"
        return Cond(
            f"coalesce(CASE WHEN {leaf.j} IS NULL THEN false ELSE {holds} END, false)",
            f"coalesce({OK} AND CASE WHEN {leaf.j} IS NULL THEN {leaf.missing_sure} "
            "ELSE true END, false)",
        )

    def compare(self, node: tuple[Any, ...]) -> Cond:
        op, left, right = node[1], node[2], node[3]
        if op == "=~":
            if left == ("var", "topic", []) and right[0] == "const" and isinstance(right[1], str):
                if "topic" not in self.bound and topic_filter_problem(right[1]) is None:
                    return Cond(f"coalesce({topic_matches('topic', right[1])}, false)", "true")
            raise NotNative("=~ other than topic =~ 'filter'")
        if left[0] == "const" and right[0] != "const":
            left, right, op = right, left, _FLIP[op]
        if right[0] != "const" or left[0] == "const":
            raise NotNative("a comparison of two computed values")
        value_literal = right[1]
        if isinstance(value_literal, bool) or not isinstance(value_literal, int | float | str):
            raise NotNative("a comparison with a boolean")
        if isinstance(value_literal, int) and abs(value_literal) >= EXACT:
            raise NotNative("an integer literal beyond 2^53")
        value = self.value(left)
        if value.kind == "json":
            return _compare_json(_Leaf(value.index), op, value_literal)
        if value.kind == "payload":
            return _compare_text(value.sql, f"({TEXT} IS NOT NULL)", op, value_literal)
        if value.kind == "str":
            return _compare_text(value.sql, "true", op, value_literal)
        return _compare_number(value.sql, op, value_literal)

    def member(self, node: tuple[Any, ...]) -> Cond:
        value, items, negated = self.value(node[1]), node[2], node[3]
        if any(item[0] != "const" for item in items):
            raise NotNative("IN with a computed item")
        literals = [item[1] for item in items]
        if any(isinstance(v, bool) or not isinstance(v, int | float | str) for v in literals):
            raise NotNative("IN with a boolean")
        if any(type(v) is int and abs(v) >= EXACT for v in literals):
            raise NotNative("an integer literal beyond 2^53")
        strings = [v for v in literals if isinstance(v, str)]
        ints = [float(v) for v in literals if type(v) is int]
        floats = [v for v in literals if type(v) is float]
        if value.kind == "json":
            leaf = _Leaf(value.index)
            found = (
                f"CASE WHEN {leaf.j} IS NULL THEN false "
                f"WHEN {leaf.is_string} THEN {_isin(leaf.s, strings)} "
                f"WHEN {leaf.py_int} THEN {_isin(leaf.x, ints)} "
                f"WHEN {leaf.py_float} THEN {_isin(leaf.x, floats)} ELSE false END"
            )
            sure = (
                f"CASE WHEN {leaf.j} IS NULL THEN {leaf.missing_sure} "
                f"WHEN {leaf.is_number} THEN {leaf.number_sure} ELSE true END"
            )
            sure = f"coalesce({OK} AND {sure}, false)"
        elif value.kind in ("str", "payload"):
            found = _isin(value.sql, strings)
            sure = f"({TEXT} IS NOT NULL)" if value.kind == "payload" else "true"
        else:
            found = _isin(f"CAST({value.sql} AS DOUBLE)", ints)
            sure = "true"
        found = f"coalesce({found}, false)"
        return Cond(f"(NOT {found})" if negated else found, sure)


def _like_twice(key: str) -> str:
    """A LIKE pattern: the key, quoted as JSON writes it, twice (a duplicate, or the same name
    elsewhere: either way not sure)."""
    quoted = '"' + key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + '"'
    return f"%{quoted}%{quoted}%"


def _isin(column: str, values: list[Any]) -> str:
    if not values:
        return "false"
    items = ", ".join(literal(v) if isinstance(v, str) else _number(v) for v in values)
    return f"({column} IN ({items}))"


def _number_cond(x: str, op: str, value: int | float) -> Cond:
    return Cond(f"coalesce({x} {_OPS[op]} {_number(value)}, false)", f"({x} IS NOT NULL)")


def _text_cond(text: str, op: str, value: str) -> str:
    return f"({text} {_OPS[op]} {literal(value)})"


def _number_or_none(text: str) -> int | float | None:
    try:
        number = parse_number(text)
    except Exception:
        return None
    if type(number) is int and abs(number) >= EXACT:
        return None
    if type(number) is float and not math.isfinite(number):
        return None
    return number


def _higher_rank(op: str) -> str:
    """The value is of a higher Erlang rank than the literal."""
    return {"=": "false", "!=": "true", "<>": "true", "<": "false", "<=": "false"}.get(op, "true")


def _lower_rank(op: str) -> str:
    if op in ("=", "!=", "<>"):
        return _higher_rank(op)
    return "true" if _higher_rank(op) == "false" else "false"


def _compare_json(leaf: _Leaf, op: str, value: Any) -> Cond:
    if isinstance(value, str):
        number = _number_or_none(value)
        on_number = (
            _number_cond(leaf.x, op, number) if number is not None else Cond("false", "false")
        )
        on_string = _text_cond(leaf.s, op, value)
        result = (
            f"CASE WHEN {leaf.j} IS NULL THEN false WHEN {leaf.is_string} THEN {on_string} "
            f"WHEN {leaf.is_number} THEN {on_number.value} "
            f"WHEN {leaf.is_atom} THEN {_text_cond(leaf.atom_text, op, value)} "
            f"ELSE {_lower_rank(op)} END"
        )
        sure = (
            f"CASE WHEN {leaf.j} IS NULL THEN {leaf.missing_sure} "
            f"WHEN {leaf.is_number} THEN {on_number.sure} AND {leaf.number_sure} "
            f"WHEN {leaf.is_string} OR {leaf.is_atom} OR {leaf.is_container} THEN true "
            "ELSE false END"
        )
    else:
        on_number = _number_cond(leaf.x, op, value)
        on_text = _compare_number_text(leaf.s, op, value)
        result = (
            f"CASE WHEN {leaf.j} IS NULL THEN false WHEN {leaf.is_number} THEN {on_number.value} "
            f"WHEN {leaf.is_string} THEN {on_text.value} ELSE {_higher_rank(op)} END"
        )
        sure = (
            f"CASE WHEN {leaf.j} IS NULL THEN {leaf.missing_sure} "
            f"WHEN {leaf.is_number} THEN {leaf.number_sure} "
            f"WHEN {leaf.is_string} THEN {on_text.sure} "
            f"WHEN {leaf.is_atom} OR {leaf.is_container} THEN true ELSE false END"
        )
    return Cond(f"coalesce({result}, false)", f"coalesce({OK} AND {sure}, false)")


def _compare_number(column: str, op: str, value: Any) -> Cond:
    """An integer column (missing when NULL) against a literal."""
    if isinstance(value, str):
        number = _number_or_none(value)
        if number is None:
            raise NotNative("a number column against a string that is not a number")
        value = number
    present = _number_cond(f"CAST({column} AS DOUBLE)", op, value)
    return Cond(f"(CASE WHEN {column} IS NULL THEN false ELSE {present.value} END)", "true")


def _compare_text(text: str, sure: str, op: str, value: Any) -> Cond:
    """A string (missing when NULL) against a literal: text order, or as a number."""
    if isinstance(value, str):
        return Cond(f"coalesce({_text_cond(text, op, value)}, false)", f"coalesce({sure}, false)")
    read = _compare_number_text(text, op, value)
    return Cond(
        f"(CASE WHEN {text} IS NULL THEN false ELSE {read.value} END)",
        f"coalesce({sure} AND CASE WHEN {text} IS NULL THEN true ELSE {read.sure} END, false)",
    )


def _compare_number_text(text: str, op: str, value: int | float) -> Cond:
    """A string beside a number is read as an Erlang integer or float (else the evaluator fails
    the row: not sure)."""
    readable = (
        f"(regexp_full_match({text}, {literal(_INT_TEXT)}) OR "
        f"regexp_full_match({text}, {literal(_FLOAT_TEXT)}))"
    )
    number = f"(CASE WHEN {readable} THEN TRY_CAST({text} AS DOUBLE) END)"
    compared = _number_cond(number, op, value)
    return Cond(f"coalesce({compared.value}, false)", f"coalesce({number} IS NOT NULL, false)")


def topic_matches(column: str, topic_filter: str) -> str:
    """The exact MQTT match of `topic_filter` on a topic column: without `+`, an equality or a
    prefix test; with one, the codec's regex."""
    levels = topic_filter.split("/")
    dollar = f"NOT starts_with({column}, '$')" if topic_filter[:1] in ("+", "#") else None
    if "+" not in levels:
        if levels[-1] != "#":
            return f"({column} = {literal(topic_filter)})"
        if len(levels) == 1:
            return f"({dollar})"
        prefix = "/".join(levels[:-1])
        test = f"({column} = {literal(prefix)} OR starts_with({column}, {literal(prefix + '/')}))"
        return f"({test} AND {dollar})" if dollar else test
    # The codec's translation decides the `$` rule itself (no look-ahead: RE2 takes it).
    return f"regexp_full_match({column}, {literal(topic_filter_regex(topic_filter))})"


# -- a rule --------------------------------------------------------------------------------------


@dataclass
class NativeRule:
    stage: Stage
    sure: str  # SQL: the native answer is the evaluator's
    passes: str  # SQL: WHERE holds (where sure)


def _transparent(item: tuple[Any, ...]) -> bool:
    _, expr, alias, _text = item
    return alias is None and expr[0] == "var" and not expr[2]


def compile_native(sql: str) -> NativeRule:
    """The rule's DuckDB columns, or NotNative when some part has no exact equivalent here."""
    from common.rules import functions as funcs
    from common.rules.parser import parse

    statement = parse(sql, funcs.ARITIES)
    if statement.foreach or statement.do or statement.incase is not None:
        raise NotNative("FOREACH")
    if not statement.sources or any(s.startswith("$events/") for s in statement.sources):
        raise NotNative("event sources")
    stage = Stage()
    bound: set[str] = set()
    outputs_payload = False
    select_values: list[tuple[Any, ...]] = []
    for item in statement.fields:
        if item[0] == "star":
            outputs_payload = True
            continue
        _, expr, alias, _text = item
        if expr[0] == "const":
            pass
        elif expr[0] == "var" and (expr[1] == "payload" or (not expr[2] and expr[1] in _COLUMNS)):
            select_values.append(expr)
            outputs_payload = outputs_payload or expr[1] == "payload"
        else:
            raise NotNative("an output Python computes")
        if alias is not None:
            bound.add(alias[0][1] if alias[0][0] == "key" else "")
        elif not _transparent(item):
            bound.add(expr[1] if expr[0] == "var" else "")
    compiler = RuleCompiler(stage, bound)
    where = compiler.cond(statement.where) if statement.where is not None else Cond("true", "true")
    # The SELECT's paths parse the payload too: it must be readable, whatever WHERE reads.
    for expr in select_values:
        if expr[1] == "payload" and expr[2]:
            stage.path(_segments(expr))
        elif expr[1] == "payload":
            stage.reads_payload = True
    if outputs_payload:
        stage.reads_payload = True
    select_sure = "true"
    if stage.paths:
        select_sure = OK
    elif stage.reads_payload:
        select_sure = f"coalesce({TEXT} IS NOT NULL AND strlen({TEXT}) < {MAX_PAYLOAD}, false)"
    return NativeRule(
        stage=stage,
        sure=f"coalesce({select_sure} AND {where.sure}, false)",
        passes=f"coalesce({where.value}, false)",
    )

"""Rules compiled to native Spark expressions: no Python worker for the rows Spark can decide.

The Python evaluator (`CompiledRule.apply`, the dry run's semantics) stays the reference. This
module compiles the parts of a rule that have an *exact* Spark equivalent and, per row, also a
condition saying where that equivalent is exact ("sure"). Rows where every native rule is sure
never reach Python; the others go to the evaluator, for the rules not sure of them only. So a rule
is either native (its SELECT and WHERE compile here) or left to Python whole, and a native rule's
row is either decided here or handed over: a gap in this module can cost speed, never a result.
`tests/spark/test_native.py` runs the dialect's case tables and hypothesis payloads through both
and asserts the same results.

What compiles (anything else leaves the rule to Python):

- FROM: topic filters (the exact MQTT match: an equality or prefix test, a Java regex with `+`);
  `$events/…` sources do not compile.
- SELECT: no FOREACH; `*` (it cannot raise: its rows that WHERE rejects are answered here, those
  it takes go to Python for their outputs), and otherwise each field a plain path `payload.k1.k2[i][-j]` (keys, non-zero
  literal indexes) with a one-name alias, or a bare column (`payload`, `topic`, `clientid`,
  `username`, `qos`, `timestamp`, `publish_received_at`) without one; distinct output names. An
  output value is sure when it is a JSON scalar Spark renders as Python would (no `E` notation) or
  a column; objects and arrays are left to Python (Spark's variant orders object keys).
- WHERE: AND / OR / NOT (with the evaluator's left-to-right short circuit: a later side that would
  raise is never reached), `=`, `!=`, `<>`, `<`, `<=`, `>`, `>=` between one of those values and a
  literal (number or string, either side), `topic =~ 'filter'`, `x [NOT] IN (literals)`, TRUE/FALSE,
  and one of those values as a condition (`WHERE payload.open`: holds only for the atom true; under
  NOT only for the atom false, as the evaluator's `is True` and its NOT of a non-boolean).
  EMQX's comparison semantics, per the value's JSON type at run time: a missing field compares
  false (`!=` too); a string beside a number is read as a number (`'2' = 2`) when it is an Erlang
  integer or float literal (else the evaluator reports the failure: not sure); true/false/null
  beside a string compare as their names; otherwise Erlang's term order (number < atom < map <
  list < binary). Numbers compare as doubles where that is exact: a Python float is the correctly
  rounded double of the same text Spark rounds correctly, and an integer below 2^53 converts
  exactly; larger integers are not sure.
- A name the SELECT binds (other than a bare column binding itself) read by WHERE or a later field:
  not compiled (EMQX lets them read the selected value).

The payload is parsed once per row with `try_parse_json` (valid UTF-8 only), or not at all where
history stores the fields the rules read as typed columns (`payload_fields`, `Stage.parsed`). A
path into a JSON
string (EMQX decodes a string met on a path) is not sure; an unparsable payload is not sure (the
evaluator reports it as failed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark import SparkContext
from pyspark.sql import Column
from pyspark.sql import functions as F

from common.archive.schema import EVENT_PUBLISH
from common.archive.shredding import PAYLOAD_FIELDS
from common.mqtt.topics import topic_filter_regex
from common.rules.values import parse_number

VARIANT_COLUMN = "_v"  # the payload parsed once per row
PAYLOAD_OK = "_ok"  # the payload is valid UTF-8 and parsed
EXACT = 2**53  # integers below this convert to doubles exactly
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "!=": "!=", "<>": "<>"}
_NUMBER_FIRST = ("-", *"0123456789")
_INT_TEXT = "^[+-]?[0-9]{1,15}\\z"  # an Erlang integer below 2^53 (15 digits)
# A JSON `\uXXXX` escape of a high surrogate not followed by a low one, or of a low one not
# preceded by a high one (in the Java regex, `\\u` is a backslash and a `u`).
_LONE_SURROGATE = (
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
_FLOAT_TEXT = "^[+-]?[0-9]+\\.[0-9]+([eE][+-]?[0-9]+)?\\z"  # an Erlang float
# Rule columns with a direct archive equivalent: (kind, expression, may be missing).
_COLUMNS = {
    "topic": "str",
    "clientid": "str",
    "username": "str",
    "qos": "int",
    "timestamp": "int",
    "publish_received_at": "int",
}


class NotNative(Exception):
    """This rule (or a part of it) has no exact native equivalent here: Python evaluates it."""


# Column objects are immutable: a plan of many rules reuses one per literal and per column name
# instead of asking the JVM for it again (three py4j calls each; a new rule set's plan made
# hundreds of them). Kept per Spark context (a Column belongs to its JVM), bounded.
_COLUMNS_MADE: dict[tuple, Column] = {}
_MADE_FOR: list[Any] = [None]


def _made(key: tuple, make: Callable[[], Column]) -> Column:
    context = SparkContext._active_spark_context
    if _MADE_FOR[0] is not context:
        _COLUMNS_MADE.clear()
        _MADE_FOR[0] = context
    column = _COLUMNS_MADE.get(key)
    if column is None:
        if len(_COLUMNS_MADE) >= 4096:
            _COLUMNS_MADE.clear()
        column = _COLUMNS_MADE[key] = make()
    return column


def lit(value: bool | int | float | str | None) -> Column:
    """`F.lit(value)`, made once (keyed by type and repr: True is not 1, -0.0 is not 0.0)."""
    return _made(("lit", type(value), repr(value)), lambda: F.lit(value))


def col(name: str) -> Column:
    """`F.col(name)`, made once."""
    return _made(("col", name), lambda: F.col(name))


def _true() -> Column:
    return lit(True)


def _false() -> Column:
    return lit(False)


def topic_matches(topic: Column, topic_filter: str) -> Column:
    """The exact MQTT match of `topic_filter`: the codec's regex (`topic_filter_regex`), or
    without `+` an equality or a prefix test (what the regex decides, without a regex per row)."""
    levels = topic_filter.split("/")
    if "+" in levels:
        # `rlike` finds: anchored at both ends (`\z`, not `$`, which also passes a final newline).
        return topic.rlike("^(?:" + topic_filter_regex(topic_filter) + ")\\z")
    if levels[-1] != "#":
        return topic == lit(topic_filter)
    if len(levels) == 1:  # `#`: every topic but the `$` ones
        return ~topic.startswith(lit("$"))
    prefix = "/".join(levels[:-1])
    return (topic == lit(prefix)) | topic.startswith(lit(prefix + "/"))


class Stage:
    """The per-row columns the native rules share, in layers the plan projects one after another
    (so each is computed once per row however many rules use it): the parsed payload, the variant
    at each path, then per path its type, double value and whether "missing" is sure."""

    def __init__(self, typed: dict[tuple[str, ...], list[tuple[str, str]]] | None = None) -> None:
        # Per key path, the typed columns history stores for it (`payload_fields`: column name,
        # kind), read before the payload is parsed (`common.archive.shredding`).
        self.typed = typed or {}
        self.typed_columns: dict[str, list[tuple[Column, str]]] = {}  # index name -> columns
        self.fields: dict[str, str] = {}  # typed column read -> its name in the stage, `_f{k}`
        self.untyped: list[Column | None] = []  # per path: no typed value (None: never typed)
        self.paths: dict[tuple, str] = {}  # segments -> index name
        self.layer1: dict[str, Column] = {}  # `_p{i}`: the variant at a path
        self.layer2: dict[str, Column] = {}  # `_t{i}`, `_m{i}`
        self.numbers: dict[str, Column] = {}  # `_x{i}` (reads `_t{i}`)
        self.flags: dict[str, Column] = {}  # `_k{flag}{i}` (reads `_t{i}`, `_x{i}`)
        self.texts: dict[str, Column] = {}  # `_txt{i}`: a string's text (reads `_kstring{i}`)
        self.layer3: dict[str, Column] = {}  # `_cv{k}`, `_cs{k}`: each comparison's value, sure
        self._leaves: dict[str, Cond] = {}
        self._path_leaves: dict[str, Leaf] = {}
        self.uses_payload = False

    def parsed(self) -> list[Column]:
        """The payload as a VARIANT, parsed only in rows where some path has no typed value
        (history's `payload_fields`, `common.archive.shredding`; CASE is lazy). Live segments
        and history compacted before the typed fields existed have none: every row is parsed."""
        parsed = F.try_parse_json(col("payload").cast("string"))
        if not self.untyped or any(u is None for u in self.untyped):
            return [parsed.alias(VARIANT_COLUMN)]
        need = self.untyped[0]
        for other in self.untyped[1:]:
            need = need | other
        return [F.when(need, parsed).alias(VARIANT_COLUMN)]

    def payload_ok(self) -> Column:
        """The payload is valid UTF-8 JSON: it parsed, or a path of the row came typed (the
        compactor types the fields of no other document, so a typed row is not parsed)."""
        ok = F.is_valid_utf8(col("payload")) & col(VARIANT_COLUMN).isNotNull()
        # Spark 4.0's parse_json reads a lone surrogate escape (`"\ud800"`) as `?` where
        # Python's json keeps the code point (Spark 4.1+ refuses the document): such a payload is
        # the evaluator's. A pair (an escaped emoji) stays native.
        ok = ok & ~col("payload").cast("string").rlike(_LONE_SURROGATE)
        for untyped in self.untyped:
            if untyped is not None:
                ok = ~untyped | ok
        return F.coalesce(ok, _false()).alias(PAYLOAD_OK)

    def text(self, name: str) -> Column:
        """A path's string, as a column of its own, set only where the value is a string: the
        comparisons read it two or three times, and with typed fields it is a CASE, computed
        once here rather than at each reading."""
        column = f"_txt{name}"
        if column not in self.texts:
            self.texts[column] = F.when(
                col(f"_kstring{name}"),
                _typed_first(
                    self.typed_columns[name],
                    lambda c, kind: c if kind == "s" else lit(None).cast("string"),
                    F.try_variant_get(col(f"_p{name}"), "$", "string"),
                ),
            )
        return col(column)

    def _field(self, column: str) -> str:
        """The stage's name for a typed column (`_f{k}`), taken out of the struct once."""
        return self.fields.setdefault(column, f"_f{len(self.fields)}")

    def typed_fields(self) -> list[Column]:
        """The typed columns the paths read, out of `payload_fields`, for the first projection:
        each struct field read once per row, and Parquet decodes only those (nested pruning)."""
        return [col(PAYLOAD_FIELDS).getField(c).alias(a) for c, a in self.fields.items()]

    def path(self, segments: tuple) -> str:
        """The index of a payload path (its columns registered once)."""
        self.uses_payload = True
        name = self.paths.get(segments)
        if name is None:
            name = self.paths[segments] = str(len(self.paths))
            typed = [
                (col(self._field(column)), kind)
                for column, kind in self.typed.get(_key_path(segments), [])
            ]
            self.typed_columns[name] = typed
            # A row with a typed value at the path (history's `payload_fields`) reads it and
            # nothing else; the variant is navigated only where there is none.
            untyped = None
            for column, _ in typed:
                untyped = column.isNull() if untyped is None else untyped & column.isNull()
            self.untyped.append(untyped)
            navigated = _navigate(col(VARIANT_COLUMN), segments)
            self.layer1[f"_p{name}"] = navigated if untyped is None else F.when(untyped, navigated)
            value = col(f"_p{name}")
            present = value.isNotNull()
            for column, _ in typed:
                present = present | column.isNotNull()
            self.layer2[f"_e{name}"] = present
            self.layer2[f"_t{name}"] = F.schema_of_variant(value)
            # The double of a JSON number, read back from Spark's own rendering of it: the same
            # value as `try_variant_get(value, '$', 'double')` (a long is printed in full and
            # read back correctly rounded, as the long's conversion rounds; a decimal is printed
            # plain and read back correctly rounded, as BigDecimal.doubleValue; a finite double
            # round-trips; a non-finite one reads back as NULL, which is never sure), at a
            # third of the cost: variant_get builds a Cast expression per row. NULL for other
            # types, where no comparison reads it (they all look at `_t` first).
            # A typed number's double is its column's cast: a long's conversion, or a decimal of
            # at most 15 digits (exact as a long) over an exact power of ten, correctly rounded.
            self.numbers[f"_x{name}"] = _typed_first(
                typed,
                lambda c, kind: lit(None).cast("double") if kind == "s" else c.cast("double"),
                F.when(_number_type(col(f"_t{name}")), F.to_json(value).try_cast("double")),
            )
            flags = _flags(col(f"_t{name}"), col(f"_x{name}"))
            for flag in _FLAGS:
                self.flags[f"_k{flag}{name}"] = _typed_first(
                    typed,
                    lambda c, kind, flag=flag: _typed_flag(flag, kind, c, col(f"_x{name}")),
                    flags[flag],
                )
            # Missing is sure unless the path went through a JSON string (EMQX would decode it):
            # only then are the ancestors' types looked at (CASE is lazy).
            through_string = F.schema_of_variant(col(VARIANT_COLUMN)) == lit("STRING")
            for depth in range(1, len(segments)):
                ancestor = _navigate(col(VARIANT_COLUMN), segments[:depth])
                through_string = through_string | F.coalesce(
                    F.schema_of_variant(ancestor) == lit("STRING"), _false()
                )
            self.layer2[f"_m{name}"] = F.when(present, _true()).otherwise(
                ~F.coalesce(through_string, _true())
            )
        return name

    def path_leaf(self, name: str) -> Leaf:
        """The columns of the path `name` (`path`), one `Leaf` however many rules read it."""
        leaf = self._path_leaves.get(name)
        if leaf is None:
            leaf = self._path_leaves[name] = Leaf(name, self)
        return leaf

    def leaf(self, key: str, build: Any) -> Cond:
        """A comparison (or an output's sureness) as two columns of their own, built once per
        distinct `key`, so the rules' AND/OR over them stay small and each runs once per row."""
        cond = self._leaves.get(key)
        if cond is None:
            built = build()
            k = len(self._leaves)
            self.layer3[f"_cv{k}"] = built.value
            self.layer3[f"_cs{k}"] = built.sure
            cond = self._leaves[key] = Cond(col(f"_cv{k}"), col(f"_cs{k}"))
        return cond


def _key_path(segments: tuple) -> tuple[str, ...]:
    """The keys of a path of keys only (what `payload_fields` shreds), else ()."""
    if all(kind == "key" for kind, _ in segments):
        return tuple(arg for _, arg in segments)
    return ()


def _typed_first(typed: list[tuple[Column, str]], pick: Any, otherwise: Column) -> Column:
    """`pick(column, kind)` of the first typed column set in the row, else `otherwise`."""
    if not typed:
        return otherwise
    column, kind = typed[0]
    chosen = F.when(column.isNotNull(), pick(column, kind))
    for column, kind in typed[1:]:
        chosen = chosen.when(column.isNotNull(), pick(column, kind))
    return chosen.otherwise(otherwise)


def _typed_flag(flag: str, kind: str, column: Column, x: Column) -> Column:
    """A flag of `_flags` for a typed value: what its column's type says (`i` a long, `d{s}` a
    decimal, whole or not, `s` a string), as `_flags` says it of the same value's variant."""
    if kind == "s":
        return lit(flag == "string")
    # A decimal of at most 15 digits is whole exactly when its double is (the double is within
    # far less than 10^-scale of it), and the double's test costs no BigDecimal per row.
    whole = lit(True) if kind == "i" else F.floor(x) == x
    return {
        "string": _false(),
        "atom": _false(),
        "container": _false(),
        "number": _true(),
        "py_int": lit(kind == "i"),
        "py_float": lit(False) if kind == "i" else ~whole,
        "number_sure": ~whole | (F.abs(x) < lit(float(EXACT))),
    }[flag]


def _navigate(variant: Column, segments: tuple) -> Column:
    """The variant at a path of keys and 1-based indexes (negative from the end)."""
    current, path = variant, "$"
    for kind, arg in segments:
        if kind == "key":
            path += f"['{arg}']"
        elif arg > 0:
            path += f"[{arg - 1}]"
        else:  # from the end: the array, then its element (Spark's paths count from the start)
            items = F.try_variant_get(current, path, "array<variant>")
            current, path = F.try_element_at(items, lit(arg)), "$"
    return current if path == "$" else F.try_variant_get(current, path, "variant")


_INTEGERS = ("BIGINT", "INT", "SMALLINT", "TINYINT")


def _number_type(t: Column) -> Column:
    """`schema_of_variant` names a number."""
    return t.isin(*_INTEGERS, "DOUBLE", "FLOAT") | t.startswith("DECIMAL")


_FLAGS = ("string", "atom", "container", "number", "py_int", "py_float", "number_sure")


def _flags(t: Column, x: Column) -> dict[str, Column]:
    """What a path's variant type (`_t`) and double (`_x`) say about the Python value: computed
    once per path and row in a layer of their own (the comparisons then read booleans, and the
    plan's generated method stays small enough for the JIT)."""
    decimal = t.startswith("DECIMAL")
    # Python reads a JSON integer as an int, anything else as a float. Spark keeps integers
    # that fit as BIGINT, other numbers as a DECIMAL with trailing zeros stripped (so `2.0`
    # and an integer beyond 2^63 are both DECIMAL(p,0)) or, beyond 38 digits, a DOUBLE.
    fraction = decimal & ~t.endswith(",0)")
    finite = F.abs(x) < lit(1e38)
    return {
        "string": t == lit("STRING"),
        "atom": t.isin("BOOLEAN", "VOID"),  # true, false, null
        "container": t.startswith("OBJECT") | t.startswith("ARRAY"),
        "number": _number_type(t),
        "py_int": t.isin(*_INTEGERS),
        "py_float": fraction | (t.isin("DOUBLE", "FLOAT") & finite),
        # A double comparison is exact for a Python float (correctly rounded from the same text
        # as Spark's double) and for an integer below 2^53.
        "number_sure": fraction | (F.abs(x) < lit(float(EXACT))),
    }


class Leaf:
    """A payload path's stage columns: its variant, type, double, and the flags `_flags` derives
    from them."""

    def __init__(self, name: str, stage: Stage) -> None:
        typed = stage.typed_columns[name]
        # `p`: the variant at the path (a typed value as a variant: only where it is read,
        # for an output); `missing`: no value there, typed or not.
        self.p = _typed_first(typed, lambda c, _kind: c.cast("variant"), col(f"_p{name}"))
        self.missing = ~col(f"_e{name}")
        self.x, self.missing_sure = col(f"_x{name}"), col(f"_m{name}")
        flag = {f: col(f"_k{f}{name}") for f in _FLAGS}
        self.is_string, self.is_atom = flag["string"], flag["atom"]
        self.is_container, self.is_number = flag["container"], flag["number"]
        self.py_int, self.py_float = flag["py_int"], flag["py_float"]
        self.number_sure = flag["number_sure"]
        self.text = stage.text(name)

    def atom_text(self) -> Column:
        return F.to_json(self.p)  # true | false | null, as EMQX compares them with a string


@dataclass
class Value:
    """A compiled value: `kind` is "json" (a payload path: `name` indexes its stage columns),
    "str", "int" (a column; SQL NULL is EMQX's missing) or "payload" (the raw payload text)."""

    kind: str
    col: Column | None = None
    name: str | None = None
    payload: bool = False  # reads the parsed payload (needs `_ok`)


@dataclass
class Cond:
    value: Column  # meaningful where `sure`
    sure: Column


def _segments(node: tuple) -> tuple:
    out = []
    for seg in node[2]:
        if seg[0] == "key":
            key = seg[1]
            if not key or any(c in key for c in "'\\]"):
                raise NotNative("a key Spark's variant paths cannot quote")
            out.append(("key", key))
        elif seg[0] == "index" and seg[1][0] == "const" and type(seg[1][1]) is int and seg[1][1]:
            out.append(("index", seg[1][1]))
        else:
            raise NotNative("a computed index or a range")
    return tuple(out)


class RuleCompiler:
    """One rule's SELECT and WHERE → native columns over the stage (raises NotNative)."""

    def __init__(self, stage: Stage, bound: set[str]) -> None:
        self.stage = stage
        self.bound = bound  # names the SELECT binds to something other than their column

    def value(self, node: tuple) -> Value:
        if node[0] != "var":
            raise NotNative(f"{node[0]} is evaluated in Python")
        name = node[1]
        if name in self.bound:
            raise NotNative(f"{name} is bound by the SELECT")
        if name == "payload":
            if not node[2]:
                return Value("payload", col("payload").cast("string"))
            return Value("json", name=self.stage.path(_segments(node)), payload=True)
        if node[2] or name not in _COLUMNS:
            raise NotNative(f"column {name}")
        if name in ("timestamp", "publish_received_at"):
            return Value("int", F.unix_millis(col("ts")))
        column = {"clientid": "client_id"}.get(name, name)
        return Value(_COLUMNS[name], col(column).cast("long" if name == "qos" else "string"))

    # -- conditions ------------------------------------------------------------------------------
    def cond(self, node: tuple) -> Cond:
        kind = node[0]
        if kind == "and":
            a, b = self.cond(node[1]), self.cond(node[2])
            return Cond(
                F.when(a.value, b.value).otherwise(_false()),
                a.sure & F.when(a.value, b.sure).otherwise(_true()),
            )
        if kind == "or":
            a, b = self.cond(node[1]), self.cond(node[2])
            return Cond(
                F.when(a.value, _true()).otherwise(b.value),
                a.sure & F.when(a.value, _true()).otherwise(b.sure),
            )
        if kind == "var":
            return self._shared(("is", node, True), lambda: self.atom(node, True))
        if kind == "not" and node[1][0] == "var":  # not a value: true only where it is false
            return self._shared(("is", node[1], False), lambda: self.atom(node[1], False))
        if kind == "not":  # of a condition: always a boolean
            inner = self.cond(node[1])
            return Cond(~inner.value, inner.sure)
        if kind == "const" and isinstance(node[1], bool):
            return Cond(lit(node[1]), _true())
        if kind == "cmp":
            return self._shared(("cmp", node), lambda: self.compare(node))
        if kind == "in":
            return self._shared(("in", node), lambda: self.member(node))
        raise NotNative(f"{kind} as a condition")

    def _shared(self, what: tuple, build: Callable[[], Cond]) -> Cond:
        """A condition's leaf: the one registered for the same condition (and the same names
        bound by the SELECT), else built (dozens of py4j calls; NotNative raised before
        anything is registered) and registered."""
        return self.stage.leaf(repr((*what, sorted(self.bound))), build)

    def atom(self, node: tuple, wanted: bool) -> Cond:
        """A value as a condition (`WHERE payload.open`): it holds only where the value is the
        atom true (the evaluator's `is True`); under NOT, only where it is the atom false."""
        value = self.value(node)
        if value.kind != "json":  # a column or the payload's text: never a boolean
            return Cond(_false(), _true())
        leaf = self.stage.path_leaf(value.name)
        holds = leaf.is_atom & (leaf.atom_text() == lit("true" if wanted else "false"))
        sure = F.when(leaf.missing, leaf.missing_sure).otherwise(_true())
        return Cond(
            F.coalesce(F.when(leaf.missing, _false()).otherwise(holds), _false()),
            F.coalesce(col(PAYLOAD_OK) & sure, _false()),
        )

    def compare(self, node: tuple) -> Cond:
        op, left, right = node[1], node[2], node[3]
        if op == "=~":
            if left == ("var", "topic", []) and right[0] == "const" and isinstance(right[1], str):
                match = topic_matches(col("topic"), right[1])
                if "topic" not in self.bound:
                    return Cond(F.coalesce(match, _false()), _true())
            raise NotNative("=~ other than topic =~ 'filter'")
        if left[0] == "const" and right[0] != "const":
            left, right, op = right, left, _FLIP[op]
        if right[0] != "const" or left[0] == "const":
            raise NotNative("a comparison of two computed values")
        literal = right[1]
        if isinstance(literal, bool) or not isinstance(literal, int | float | str):
            raise NotNative("a comparison with a boolean")
        if isinstance(literal, int) and abs(literal) >= EXACT:
            raise NotNative("an integer literal beyond 2^53")
        value = self.value(left)
        if value.kind == "json":
            return self._compare_json(value, op, literal)
        if value.kind == "payload":
            text = value.col
            return _compare_text(text, F.is_valid_utf8(col("payload")), op, literal)
        if value.kind == "str":
            return _compare_text(value.col, _true(), op, literal)
        return _compare_number(value.col, _true(), op, literal)

    def _compare_json(self, value: Value, op: str, literal: Any) -> Cond:
        leaf = self.stage.path_leaf(value.name)
        higher_rank = {  # the JSON value is of a higher Erlang rank than the literal
            "=": _false(),
            "!=": _true(),
            "<>": _true(),
            "<": _false(),
            "<=": _false(),
            ">": _true(),
            ">=": _true(),
        }
        lower_rank = {k: (v if k in ("=", "!=", "<>") else ~v) for k, v in higher_rank.items()}
        if isinstance(literal, str):
            number = _number_or_none(literal)
            on_number = (
                _number_cond(leaf.x, op, number)
                if number is not None
                else Cond(_false(), _false())  # the evaluator fails the row
            )
            on_string = _compare_text(leaf.text, _true(), op, literal)
            value_ = (
                F.when(leaf.missing, _false())
                .when(leaf.is_string, on_string.value)
                .when(leaf.is_number, on_number.value)
                .when(leaf.is_atom, _text_cond(leaf.atom_text(), op, literal))
                .otherwise(lower_rank[op])
            )
            sure = (
                F.when(leaf.missing, leaf.missing_sure)
                .when(leaf.is_number, on_number.sure & leaf.number_sure)
                .when(leaf.is_string | leaf.is_atom | leaf.is_container, _true())
                .otherwise(_false())
            )
        else:
            on_number = _number_cond(leaf.x, op, literal)
            on_string = _compare_number_text(leaf.text, op, literal)
            value_ = (
                F.when(leaf.missing, _false())
                .when(leaf.is_number, on_number.value)
                .when(leaf.is_string, on_string.value)
                .otherwise(higher_rank[op])
            )
            sure = (
                F.when(leaf.missing, leaf.missing_sure)
                .when(leaf.is_number, leaf.number_sure)
                .when(leaf.is_string, on_string.sure)
                .when(leaf.is_atom | leaf.is_container, _true())
                .otherwise(_false())
            )
        return Cond(F.coalesce(value_, _false()), F.coalesce(col(PAYLOAD_OK) & sure, _false()))

    def member(self, node: tuple) -> Cond:
        value, items, negated = self.value(node[1]), node[2], node[3]
        if any(item[0] != "const" for item in items):
            raise NotNative("IN with a computed item")
        literals = [item[1] for item in items]
        if any(not isinstance(v, int | float | str) for v in literals):
            raise NotNative("IN with a boolean")
        if any(
            isinstance(v, int) and not isinstance(v, bool) and abs(v) >= EXACT for v in literals
        ):
            raise NotNative("an integer literal beyond 2^53")
        strings = [v for v in literals if isinstance(v, str)]
        ints = [float(v) for v in literals if type(v) is int]
        floats = [v for v in literals if type(v) is float]
        if value.kind == "json":
            leaf = self.stage.path_leaf(value.name)
            found = (
                F.when(leaf.missing, _false())
                .when(leaf.is_string, _isin(leaf.text, strings))
                .when(leaf.py_int, _isin(leaf.x, ints))
                .when(leaf.py_float, _isin(leaf.x, floats))
                .otherwise(_false())
            )
            sure = (
                F.when(leaf.missing, leaf.missing_sure)
                .when(leaf.py_int, F.abs(leaf.x) < lit(float(EXACT)))
                .when(leaf.is_number, leaf.py_float)
                .otherwise(_true())
            )
            sure = F.coalesce(col(PAYLOAD_OK) & sure, _false())
        elif value.kind in ("str", "payload"):
            found = F.coalesce(_isin(value.col, strings), _false())
            sure = F.is_valid_utf8(col("payload")) if value.kind == "payload" else _true()
            sure = F.coalesce(sure, _false())
        else:
            found = F.coalesce(_isin(value.col.cast("double"), ints), _false())
            sure = _true()
        found = F.coalesce(found, _false())
        return Cond(~found if negated else found, sure)

    # -- outputs ---------------------------------------------------------------------------------
    def output(self, node: tuple) -> tuple[Column, Column]:
        """(the output value, where it is sure) of one SELECT field; where it is sure is a leaf
        of its own, built once however many rules output the same field."""
        value = self.value(node)
        if value.kind == "json":
            leaf = self.stage.path_leaf(value.name)
            column = leaf.p
        else:
            column = value.col
        return column, self.stage.leaf(repr(("out", node)), lambda: self._output_sure(value)).sure

    def _output_sure(self, value: Value) -> Cond:
        if value.kind == "json":
            leaf = self.stage.path_leaf(value.name)
            # Strings and atoms render as Python renders them, and numbers whose Python type the
            # variant type tells; objects and arrays are left to Python (a variant orders keys).
            scalar = leaf.is_string | leaf.is_atom | leaf.py_int | leaf.py_float
            sure = F.when(leaf.missing, leaf.missing_sure).otherwise(scalar)
            return Cond(_true(), F.coalesce(col(PAYLOAD_OK) & sure, _false()))
        if value.kind == "payload":
            return Cond(_true(), F.coalesce(F.is_valid_utf8(col("payload")), _false()))
        return Cond(_true(), _true())


def _isin(column: Column, values: list) -> Column:
    return column.isin(*values) if values else _false()


def _number_or_none(text: str) -> int | float | None:
    try:
        number = parse_number(text)
    except Exception:
        return None
    if type(number) is int and abs(number) >= EXACT:
        return None
    return number


def _number_cond(x: Column, op: str, literal: int | float) -> Cond:
    c = lit(float(literal))
    compared = {
        "=": x == c,
        "!=": x != c,
        "<>": x != c,
        "<": x < c,
        "<=": x <= c,
        ">": x > c,
        ">=": x >= c,
    }[op]
    return Cond(F.coalesce(compared, _false()), x.isNotNull())


def _text_cond(text: Column, op: str, literal: str) -> Column:
    c = lit(literal)
    return {
        "=": text == c,
        "!=": text != c,
        "<>": text != c,
        "<": text < c,
        "<=": text <= c,
        ">": text > c,
        ">=": text >= c,
    }[op]


def _compare_number(column: Column, sure: Column, op: str, literal: Any) -> Cond:
    """An integer column (missing when NULL) against a literal."""
    if isinstance(literal, str):
        number = _number_or_none(literal)
        if number is None:
            raise NotNative("a number column against a string that is not a number")
        literal = number
    present = _number_cond(column.cast("double"), op, literal)
    return Cond(
        F.when(column.isNull(), _false()).otherwise(present.value), F.coalesce(sure, _false())
    )


def _compare_text(text: Column, sure: Column, op: str, literal: Any) -> Cond:
    """A string (missing when NULL) against a literal: text order, or as a number."""
    if isinstance(literal, str):
        value = F.coalesce(_text_cond(text, op, literal), _false())
        return Cond(value, F.coalesce(sure, _false()))
    read = _compare_number_text(text, op, literal)
    return Cond(
        F.when(text.isNull(), _false()).otherwise(read.value),
        F.coalesce(sure & F.when(text.isNull(), _true()).otherwise(read.sure), _false()),
    )


def _compare_number_text(text: Column, op: str, literal: int | float) -> Cond:
    """A string beside a number is read as an Erlang integer or float (else the evaluator
    fails the row: not sure)."""
    as_int = text.rlike(_INT_TEXT)
    as_float = text.rlike(_FLOAT_TEXT)
    number = F.when(as_int | as_float, text.try_cast("double"))
    compared = _number_cond(number, op, literal)
    return Cond(F.coalesce(compared.value, _false()), F.coalesce(number.isNotNull(), _false()))


# -- a rule --------------------------------------------------------------------------------------


@dataclass
class NativeRule:
    takes: Column  # FROM takes the row (publish rows of the filters)
    sure: Column  # the native answer is the evaluator's
    passes: Column  # WHERE holds (where sure)
    # The JSON list of the one output object (where it passes); None: built in Python (`*`).
    outputs: Column | None


def _transparent(field: tuple) -> bool:
    """A bare column field binds its name to its own value (reading it later sees the same)."""
    _, expr, alias, _text = field
    return alias is None and expr[0] == "var" and not expr[2]


def compile_native(sql: str, stage: Stage) -> NativeRule:
    """The rule's native columns, or NotNative when some part has no exact equivalent here."""
    from common.rules import functions as funcs
    from common.rules.parser import parse

    statement = parse(sql, funcs.ARITIES)
    if statement.foreach or statement.do or statement.incase is not None:
        raise NotNative("FOREACH")
    if not statement.sources or any(s.startswith("$events/") for s in statement.sources):
        raise NotNative("event sources")
    filters = [topic_matches(col("topic"), s) for s in statement.sources]
    bound: set[str] = set()
    names: list[str] = []
    star = False
    for field in statement.fields:
        if field[0] == "star":
            star = True  # cannot raise; its outputs (every column) are built in Python
            continue
        _, expr, alias, _text = field
        if alias is not None:
            if len(alias) != 1:
                raise NotNative("a nested alias")
            name = alias[0][1]
        elif expr[0] == "var" and not expr[2]:
            name = expr[1]
        else:
            raise NotNative("an output named by a path or its text")
        names.append(name)
        if not _transparent(field):
            bound.add(name)
    if len(set(names)) != len(names):
        raise NotNative("an output name given twice")
    compiler = RuleCompiler(stage, bound)
    fields, select_sure = [], _true()
    plain = [f for f in statement.fields if f[0] != "star"]
    for name, field in zip(names, plain, strict=True):
        value, sure = compiler.output(field[1])
        fields.append(value.alias(name))
        select_sure = select_sure & sure
    if statement.where is not None:
        where = compiler.cond(statement.where)
    else:
        where = Cond(_true(), _true())
    matches = filters[0]
    for match in filters[1:]:
        matches = matches | match
    takes = F.coalesce(
        col("topic").isNotNull()
        & (col("event").isNull() | (col("event") == lit(EVENT_PUBLISH)))
        & matches,
        _false(),
    )
    outputs = None
    if not star:
        outputs = F.to_json(F.array(F.struct(*fields)), {"ignoreNullFields": "false"})
    return NativeRule(
        takes=takes,
        sure=F.coalesce(select_sure & where.sure, _false()),
        passes=F.coalesce(where.value, _false()),
        outputs=outputs,
    )


__all__ = [
    "NativeRule",
    "NotNative",
    "Stage",
    "compile_native",
    "topic_matches",
]

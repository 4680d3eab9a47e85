"""A native prefilter for a rule's WHERE: rows Spark can prove the rule skips never reach Python.

The Python evaluator (`CompiledRule.apply`, the dry run's semantics) stays the authority. This
module only proves, with Spark's own vectorised functions, that a row is one the evaluator would
answer `skipped` (FROM takes it, evaluation raises nothing, WHERE is not true). Such rows become
`skipped` results natively — counted and metered exactly as before — and the Python worker never
sees them. Every other row goes to Python, so a mistake here can only cost speed, never a row,
as long as the proof is sound; `tests/spark/test_prefilter.py` checks it against the evaluator on
a table of dialect cases.

The WHERE is compiled to a three-valued Spark expression `D`: TRUE or FALSE when Spark knows the
condition's value *and* that evaluating it raises nothing, NULL when it does not know. Leaves:

- `payload.a.b OP number` (`=`, `<`, `<=`, `>`, `>=`, either side): payload parsed once per row
  with `try_parse_json` (valid UTF-8 only); a JSON number leaf compares as a double, except
  within 1e-9 (relative) of the literal, where rounding could flip it (NULL); a key that is
  absent is FALSE (EMQX: a missing field compares false with a value) unless an ancestor is a JSON
  string (EMQX reads a string met on a path as JSON: NULL); strings (`'2' = 2` is true in EMQX),
  booleans, JSON null, objects, arrays: NULL.
- `payload.a.b = 'text'`: equal strings TRUE, other strings FALSE, absent FALSE, the rest NULL.
- `topic = 'literal'`, `topic =~ 'filter'` (the exact MQTT match, as a Java regex).
- anything else: NULL.

`AND`/`OR` follow the evaluator's left-to-right short circuit (a NULL left side is NULL, whatever
the right side: the left side might raise); `NOT` keeps NULL. A leaf whose root name the SELECT
may bind (EMQX lets WHERE read the selected value) is NULL.

Because SELECT is evaluated before WHERE and may raise, a rule is prefiltered only when every
field is `*` or a plain path (keys and literal indexes, no function, no arithmetic, no range) with
at most a one-name alias; if SELECT reads a payload path, the payload must parse natively too.
FOREACH rules and rules over `$events/…` are not prefiltered.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from common.archive_schema import EVENT_PUBLISH

_NUMERIC = ("BIGINT", "INT", "SMALLINT", "TINYINT", "DOUBLE", "FLOAT")
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "="}


def _null() -> Column:
    return F.lit(None).cast("boolean")


RELATIVE_MARGIN = 1e-9


VARIANT_COLUMN = "_v"  # the payload parsed once per row (a projection of its own)


class Stage:
    """What the rules' prefilters share in one plan: the parsed payload (column `_v`, which the
    plan computes in a projection below this one) and every leaf as a named column (`_l0`, …),
    so a leaf is computed once per row however many conditions use it, and the conditions built
    on them stay small (each AND/OR repeats only column references)."""

    def __init__(self) -> None:
        self.values: dict[str, Column] = {}  # `_p0`, …: the variant at a path, one per path
        self._paths: dict[str, str] = {}
        self.leaves: dict[str, Column] = {}
        self.variant = F.col(VARIANT_COLUMN)
        self.ok = self.leaf(
            F.coalesce(F.is_valid_utf8(F.col("payload")) & self.variant.isNotNull(), F.lit(False))
        )
        # Evaluated only where needed (an absent leaf), never as a column: a regex per row costs.
        self.root_is_string = F.coalesce(
            F.col("payload").cast("string").rlike('^[ \\t\\r\\n]*"'), F.lit(False)
        )

    def value(self, path: str) -> Column:
        """The variant at `path`, a column of its own (navigated once per row)."""
        name = self._paths.get(path)
        if name is None:
            name = self._paths[path] = f"_p{len(self._paths)}"
            self.values[name] = self.get(path)
        return F.col(name)

    def leaf(self, expr: Column) -> Column:
        name = f"_l{len(self.leaves)}"
        self.leaves[name] = expr
        return F.col(name)

    @staticmethod
    def parsed() -> Column:
        return F.try_parse_json(F.col("payload").cast("string")).alias(VARIANT_COLUMN)

    def get(self, path: str, target: str = "variant") -> Column:
        return F.try_variant_get(self.variant, path, target)


def _json_path(keys: list[str]) -> str | None:
    if any(("'" in k) or ("\\" in k) or ("]" in k) or not k for k in keys):
        return None
    return "$" + "".join(f"['{k}']" for k in keys)


def _payload_path(node: tuple, assigned: set[str]) -> list[str] | None:
    """The keys of `payload.k1.k2…` (keys only), or None."""
    if node[0] != "var" or node[1] != "payload" or "payload" in assigned or not node[2]:
        return None
    keys = []
    for seg in node[2]:
        if seg[0] != "key":
            return None
        keys.append(seg[1])
    return keys


def _path_leaf(keys: list[str], op: str, literal: Any, payload: Stage) -> Column:
    path = _json_path(keys)
    if path is None or isinstance(literal, bool):
        return _null()
    value = payload.value(path)  # the leaf's variant, navigated once per row
    kind = F.schema_of_variant(value)
    if isinstance(literal, int | float):
        if op not in _FLIP:
            return _null()
        x = F.try_variant_get(value, "$", "double")
        c = F.lit(float(literal))
        numeric = kind.isin(*_NUMERIC) | kind.startswith("DECIMAL")
        near = F.abs(x - c) <= F.lit(RELATIVE_MARGIN) * (F.abs(x) + F.abs(c)) + F.lit(1e-300)
        compared = {"=": x == c, "<": x < c, "<=": x <= c, ">": x > c, ">=": x >= c}[op]
        known = F.when(numeric & x.isNotNull() & ~near, compared)
    elif isinstance(literal, str):
        if op != "=":
            return _null()
        text = F.try_variant_get(value, "$", "string")
        known = F.when(kind == F.lit("STRING"), text == F.lit(literal))
    else:
        return _null()
    # Only an absent leaf needs its ancestors' types (a path through a JSON string does not
    # resolve in the variant, while EMQX would read that string as JSON): checked last.
    ancestors_string = payload.root_is_string
    for depth in range(1, len(keys)):
        ancestor = F.schema_of_variant(payload.get(_json_path(keys[:depth])))
        ancestors_string = ancestors_string | F.coalesce(ancestor == F.lit("STRING"), F.lit(False))
    return payload.leaf(
        F.when(~payload.ok, _null())
        .when(value.isNotNull(), known)
        .when(ancestors_string, _null())
        .otherwise(F.lit(False))
    )


def topic_filter_java_regex(topic_filter: str) -> str | None:
    """The exact MQTT match of `topic_filter` as a Java regex (None when it cannot be quoted)."""
    if "\\E" in topic_filter:
        return None
    levels = topic_filter.split("/")
    tail = ""
    if levels[-1] == "#":
        levels = levels[:-1]
        tail = "(/.*)?" if levels else ".*"
    parts = ["[^/]*" if level == "+" else f"\\Q{level}\\E" for level in levels]
    head = "(?!\\$)" if topic_filter[:1] in ("+", "#") else ""
    return "(?s)^" + head + "/".join(parts) + tail + "\\z"


def _cmp(node: tuple, assigned: set[str], payload: Stage) -> Column:
    op, left, right = node[1], node[2], node[3]
    if op == "=~":
        if (
            left[0] == "var"
            and left[1] == "topic"
            and not left[2]
            and "topic" not in assigned
            and right[0] == "const"
            and isinstance(right[1], str)
        ):
            regex = topic_filter_java_regex(right[1])
            if regex is not None:
                return payload.leaf(F.coalesce(F.col("topic").rlike(regex), F.lit(False)))
        return _null()
    if right[0] != "const" and left[0] == "const":
        left, right, op = right, left, _FLIP.get(op, "?")
    if right[0] != "const":
        return _null()
    literal = right[1]
    if (
        left[0] == "var"
        and left[1] == "topic"
        and not left[2]
        and "topic" not in assigned
        and op == "="
        and isinstance(literal, str)
    ):
        return payload.leaf(F.coalesce(F.col("topic") == F.lit(literal), F.lit(False)))
    keys = _payload_path(left, assigned)
    if keys is None:
        return _null()
    return _path_leaf(keys, op, literal, payload)


def where_value(node: tuple, assigned: set[str], payload: Stage) -> Column:
    """The WHERE as a three-valued Spark condition (see the module docstring)."""
    kind = node[0]
    if kind == "cmp":
        return _cmp(node, assigned, payload)
    if kind == "and":
        a, b = where_value(node[1], assigned, payload), where_value(node[2], assigned, payload)
        return F.when(a.isNull(), _null()).when(a, b).otherwise(F.lit(False))
    if kind == "or":
        a, b = where_value(node[1], assigned, payload), where_value(node[2], assigned, payload)
        return F.when(a.isNull(), _null()).when(a, F.lit(True)).otherwise(b)
    if kind == "not":
        return ~where_value(node[1], assigned, payload)
    if kind == "const" and isinstance(node[1], bool):
        return F.lit(node[1])
    return _null()


def _select_is_safe(fields: list) -> tuple[bool, bool]:
    """(SELECT cannot raise once the payload parses, SELECT reads a payload path)."""
    reads_payload = False
    for field in fields:
        if field[0] == "star":
            continue
        _, expr, alias, _text = field
        if alias is not None and len(alias) != 1:
            return False, reads_payload
        if expr[0] != "var":
            return False, reads_payload
        for seg in expr[2]:
            if seg[0] == "range" or (seg[0] == "index" and seg[1][0] != "const"):
                return False, reads_payload
        if expr[1] == "payload" and expr[2]:
            reads_payload = True
    return True, reads_payload


def skipped_condition(sql: str, client_prefix: str, payload: Stage) -> Column | None:
    """Rows this rule surely answers `skipped` (FROM takes them, nothing raises, WHERE is not
    true), or None when the rule is not prefiltered. The caller ANDs it with the tenant."""
    from common.rules import functions as funcs
    from common.rules.compiler import _assigned_names
    from common.rules.parser import parse

    statement = parse(sql, funcs.ARITIES)
    if statement.foreach or statement.where is None:
        return None
    if any(s.startswith("$events/") for s in statement.sources):
        return None
    safe, select_reads_payload = _select_is_safe(statement.fields)
    if not safe:
        return None
    regexes = [topic_filter_java_regex(s) for s in statement.sources]
    if not regexes or any(r is None for r in regexes):
        return None
    value = where_value(statement.where, _assigned_names(statement), payload)
    takes = F.col("topic").isNotNull() & (
        F.col("event").isNull() | (F.col("event") == F.lit(EVENT_PUBLISH))
    )
    matches = F.col("topic").rlike(regexes[0])
    for regex in regexes[1:]:
        matches = matches | F.col("topic").rlike(regex)
    condition = (
        takes
        & matches
        & ~F.coalesce(F.col("client_id"), F.lit("")).startswith(client_prefix)
        & F.coalesce(value == F.lit(False), F.lit(False))
    )
    if select_reads_payload:
        condition = condition & payload.ok & ~payload.root_is_string
    return condition

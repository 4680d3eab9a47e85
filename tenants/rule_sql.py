"""Syntax check of rule SQL, EMQX's dialect: `SELECT fields FROM "topic/filter" [WHERE cond]`.

Stored rules run later as Spark SQL over the tenant's message archive; this check catches what a
user gets wrong at the API, with a message naming the problem, before anything runs.
"""

from __future__ import annotations

import re

from data_plane.mqtt.errors import MQTTError
from data_plane.mqtt.topics import validate_topic_filter


class RuleSqlError(ValueError):
    pass


_STATEMENT = re.compile(
    r"""^\s*SELECT\s+(?P<fields>.+?)\s+FROM\s+(?P<sources>.+?)
        (?:\s+WHERE\s+(?P<where>.+?))?\s*;?\s*$""",
    re.IGNORECASE | re.DOTALL | re.VERBOSE,
)
_SOURCE = re.compile(r'^\s*"(?P<filter>[^"]*)"\s*$')
_FORBIDDEN = re.compile(
    r"\b(INSERT|UPDATE|DELETE|DROP|ALTER|CREATE|GRANT|TRUNCATE|UNION|JOIN)\b", re.IGNORECASE
)


def validate_rule_sql(sql: str) -> list[str]:
    """Return the topic filters the rule reads; raise RuleSqlError naming the problem."""
    if not sql or not sql.strip():
        raise RuleSqlError("SQL is empty.")
    _check_balanced(sql)
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "''", sql)
    forbidden = _FORBIDDEN.search(unquoted)
    if forbidden:
        raise RuleSqlError(f"{forbidden.group(1).upper()} is not allowed in a rule.")
    match = _STATEMENT.match(sql)
    if not match:
        if not re.match(r"^\s*SELECT\b", sql, re.IGNORECASE):
            raise RuleSqlError("A rule must start with SELECT.")
        raise RuleSqlError('Expected SELECT <fields> FROM "<topic filter>" [WHERE <condition>].')
    if not match.group("fields").strip():
        raise RuleSqlError("SELECT needs at least one field (or *).")
    if match.group("fields").strip().endswith(","):
        raise RuleSqlError("Trailing comma in the SELECT list.")

    filters = []
    for source in _split_commas(match.group("sources")):
        quoted = _SOURCE.match(source)
        if not quoted:
            raise RuleSqlError(
                f'FROM expects topic filters in double quotes, e.g. FROM "sensors/+/temp"; got '
                f"{source.strip()!r}."
            )
        try:
            validate_topic_filter(quoted.group("filter"))
        except MQTTError as exc:
            raise RuleSqlError(f"Invalid topic filter {quoted.group('filter')!r}: {exc}") from None
        filters.append(quoted.group("filter"))
    where = match.group("where")
    if where is not None and not where.strip():
        raise RuleSqlError("WHERE needs a condition.")
    return filters


def _check_balanced(sql: str) -> None:
    depth = 0
    quote: str | None = None
    for char in sql:
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise RuleSqlError("Unbalanced parentheses: ')' without '('.")
    if quote:
        raise RuleSqlError(f"Unterminated string: missing closing {quote}.")
    if depth:
        raise RuleSqlError("Unbalanced parentheses: '(' without ')'.")


def _split_commas(text: str) -> list[str]:
    parts, current, quote = [], [], None
    for char in text:
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == ",":
            parts.append("".join(current))
            current = []
            continue
        current.append(char)
    parts.append("".join(current))
    return parts

"""Save-time check of rule SQL: the dialect's compiler (`common.rules`) is the only judge.

A rule that compiles here is exactly what the Spark jobs and the dry run will run; the error
names the problem and where (`line 1, column 17: ...`), and carries `line`/`column` for the API.
"""

from __future__ import annotations

from common.rules import RuleSyntaxError, compile_rule


class RuleSqlError(ValueError):
    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message = message
        self.line = line
        self.column = column
        super().__init__(message if line is None else f"line {line}, column {column}: {message}")


def validate_rule_sql(sql: str) -> list[str]:
    """Return the topic filters the rule reads; raise RuleSqlError naming the problem."""
    try:
        rule = compile_rule(sql)
    except RuleSyntaxError as exc:
        raise RuleSqlError(exc.message, exc.line, exc.column) from None
    return list(rule.topic_filters)

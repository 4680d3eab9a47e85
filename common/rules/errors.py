"""The two errors of the dialect: a rule that cannot compile, and one that failed on a message."""

from __future__ import annotations


class RuleSyntaxError(ValueError):
    """The SQL is not a rule this platform runs; `line`/`column` (1-based) say where, if known."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        self.message = message
        self.line = line
        self.column = column
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.line is None:
            return self.message
        return f"line {self.line}, column {self.column}: {self.message}"


class RuleRuntimeError(ValueError):
    """Evaluating a rule on one message failed (bad JSON payload, a function's bad argument)."""

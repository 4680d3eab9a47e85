"""Rule SQL text -> a small AST of tuples, or a RuleSyntaxError naming the problem and where.

The grammar (`grammar.lark`) admits only the dialect, so UNION, JOIN, subqueries, table names and
second statements are syntax errors by construction; this module turns lark's errors into
messages a user can act on, and checks what a grammar cannot (function names and arities, topic
filters, event names, index literals).

AST nodes (tuples, first item the kind):
  ("const", value) · ("var", name, segments) · ("fun", name, args) · ("arith", op, l, r) ·
  ("cmp", op, l, r) · ("and", l, r) · ("or", l, r) · ("not", x) · ("in", x, items, negated) ·
  ("neg", x) · ("list", items) · ("range", a, b) · ("case", on | None, [(when, then)], else | None)
Fields: ("star",) · ("field", expr, alias | None, source text of expr when no alias).
Path segments: ("key", name) · ("index", node) · ("range", a, b).
Alias segments: ("key", name) · ("index", int) · ("head",) for [0] · ("tail",) for [-0].
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from common.rules.budget import MAX_LITERAL_DIGITS
from common.rules.errors import RuleSyntaxError
from common.rules.topics import topic_filter_problem

MAX_SQL_CHARS = 20_000  # a rule is a few lines; this bounds parse time and stored size
MAX_NESTING = 64  # parentheses/brackets: bounds recursion when compiling and evaluating

# Words of other SQL dialects a user (or an attacker) may try; named in the error.
_FOREIGN_WORDS = {
    "UNION",
    "JOIN",
    "INSERT",
    "UPDATE",
    "DELETE",
    "DROP",
    "ALTER",
    "CREATE",
    "GRANT",
    "TRUNCATE",
    "INTO",
    "GROUP",
    "ORDER",
    "HAVING",
    "LIMIT",
    "WITH",
    "LATERAL",
    "EXCEPT",
    "INTERSECT",
    "VALUES",
    "TABLE",
    "EXEC",
    "EXECUTE",
    "CALL",
    "SET",
    "USE",
    "LOAD",
    "COPY",
    "ATTACH",
    "PRAGMA",
}


@dataclass(frozen=True)
class Statement:
    foreach: bool
    fields: list[Any]
    do: list[Any]
    incase: Any
    sources: list[str]
    where: Any


@functools.cache
def _parser() -> Lark:
    # Read as a package resource, not a path: the cluster imports common/ from a zip
    # (spark/package.py's platform.zip, spark-submit --py-files).
    grammar = resources.files("common.rules").joinpath("grammar.lark").read_text(encoding="utf-8")
    return Lark(grammar, parser="lalr", lexer="contextual", propagate_positions=True)


def _unquote(text: str) -> str:
    quote = text[0]
    return text[1:-1].replace(quote + quote, quote)


def _err(message: str, token: Any) -> RuleSyntaxError:
    return RuleSyntaxError(message, getattr(token, "line", None), getattr(token, "column", None))


def _number(text: str) -> int | float:
    if re.fullmatch(r"[0-9]+", text):
        if len(text) > MAX_LITERAL_DIGITS:  # Python itself parses at most 4,300 digits
            raise _err(f"an integer literal may have at most {MAX_LITERAL_DIGITS} digits", text)
        return int(text)
    return float(text)


@v_args(inline=True)
class _ToAst(Transformer[Any, Any]):
    """Parse tree -> AST; `functions` is the registry used to check names and arities."""

    def __init__(self, sql: str, functions: dict[str, tuple[int, int | None]]):
        super().__init__()
        self.sql = sql
        self.functions = functions

    # -- statements ---------------------------------------------------------------------------
    def start(self, statement):
        return statement

    def select_stmt(self, _kw, fields, _from, sources, where=None):
        return Statement(False, fields, [], None, sources, where[1] if where else None)

    def foreach_stmt(self, _kw, fields, *rest):
        do, incase, sources, where = [], None, None, None
        for item in rest:
            if isinstance(item, tuple) and item and item[0] == "do_clause":
                do = item[1]
            elif isinstance(item, tuple) and item and item[0] == "incase_clause":
                incase = item[1]
            elif isinstance(item, tuple) and item and item[0] == "where_clause":
                where = item[1]
            elif isinstance(item, list):
                sources = item
        # The grammar makes FROM mandatory: `sources` is always set by here.
        return Statement(True, fields, do, incase, sources, where)  # type: ignore[arg-type]

    def do_clause(self, _kw, fields):
        return ("do_clause", fields)

    def incase_clause(self, _kw, expr):
        return ("incase_clause", expr)

    def where(self, _kw, expr):
        return ("where_clause", expr)

    def fields(self, *items):
        return list(items)

    def star(self, _token):
        return ("star",)

    @v_args(meta=True)
    def field_plain(self, meta, children):
        (expr,) = children
        text = self.sql[meta.start_pos : meta.end_pos] if not meta.empty else "_v_expr"
        return ("field", expr, None, " ".join(text.split()))

    def field_as(self, expr, _as, alias):
        return ("field", expr, alias, None)

    def field_as_implicit(self, expr, alias):
        return ("field", expr, alias, None)  # EMQX: `SELECT payload.x y` is `... AS y`

    def alias(self, head, *segs):
        return [head, *segs]

    def alias_name(self, token):
        return ("key", str(token))

    def alias_quoted(self, token):
        return ("key", _unquote(token))

    def alias_key(self, token):
        return ("key", str(token))

    def alias_key_quoted(self, token):
        return ("key", _unquote(token))

    def alias_index(self, token):
        value = _number(token)
        if not isinstance(value, int):
            raise _err(f"an index in AS must be an integer, got {token}", token)
        return ("head",) if value == 0 else ("index", value)

    def alias_index_neg(self, token):
        value = _number(token)
        if not isinstance(value, int):
            raise _err(f"an index in AS must be an integer, got -{token}", token)
        return ("tail",) if value == 0 else ("index", -value)

    def sources(self, *items):
        return list(items)

    def source_dq(self, token):
        return self._source(token)

    def source_sq(self, token):
        return self._source(token)

    def _source(self, token):
        text = _unquote(token)
        if text.startswith("$events/"):
            return text  # an EMQX event: one the archive has no rows for takes nothing
        problem = topic_filter_problem(text)
        if problem:
            raise _err(f"Invalid topic filter {text!r} in FROM: {problem}", token)
        return text

    # -- expressions --------------------------------------------------------------------------
    def or_expr(self, *items):
        node = items[0]
        for right in items[2::2]:
            node = ("or", node, right)
        return node

    def and_expr(self, *items):
        node = items[0]
        for right in items[2::2]:
            node = ("and", node, right)
        return node

    def not_(self, _kw, expr):
        return ("not", expr)

    def compare(self, left, op, right):
        return ("cmp", str(op), left, right)

    def in_(self, value, _kw, items):
        return ("in", value, items, False)

    def not_in(self, value, _not, _in, items):
        return ("in", value, items, True)

    def arith(self, left, op, right):
        return ("arith", str(op).lower(), left, right)

    def neg(self, expr):
        if (
            expr[0] == "const"
            and isinstance(expr[1], (int, float))
            and not isinstance(expr[1], bool)
        ):
            return ("const", -expr[1])
        return ("neg", expr)

    def number(self, token):
        return ("const", _number(token))

    def string(self, token):
        return ("const", _unquote(token))

    def true(self, _token):
        return ("const", True)

    def false(self, _token):
        return ("const", False)

    def list_(self, items=None):
        return ("list", items or [])

    def range_gen(self, a, b):
        return ("range", a, b)

    def expr_list(self, *items):
        return list(items)

    def funcall(self, name, args=None):
        args = args or []
        lowered = str(name).lower()
        arity = self.functions.get(lowered)
        if arity is None:
            raise _err(_unknown_function_message(str(name)), name)
        low, high = arity
        if len(args) < low or (high is not None and len(args) > high):
            expected = (
                str(low) if low == high else f"{low} to {high if high is not None else 'any'}"
            )
            raise _err(
                f"{lowered}() takes {expected} argument{'s' if high != 1 else ''}, got {len(args)}",
                name,
            )
        return ("fun", lowered, args)

    def var_path(self, head, *segs):
        return ("var", head, list(segs))

    def head_name(self, token):
        return str(token)

    def head_quoted(self, token):
        return _unquote(token)

    def seg_key(self, token):
        return ("key", str(token))

    def seg_key_quoted(self, token):
        return ("key", _unquote(token))

    def seg_index(self, expr):
        return ("index", expr)

    def seg_range(self, a, b):
        return ("range", a, b)

    def case_expr(self, _case, *parts):
        on, whens, otherwise = None, [], None
        for part in parts:
            if isinstance(part, Token):
                continue
            if part[0] == "case_on":
                on = part[1]
            elif part[0] == "when":
                whens.append((part[1], part[2]))
            elif part[0] == "else":
                otherwise = part[1]
        return ("case", on, whens, otherwise)

    def case_on(self, expr):
        return ("case_on", expr)

    def when_clause(self, _when, cond, _then, value):
        return ("when", cond, value)

    def else_clause(self, _else, value):
        return ("else", value)


_NOT_OFFERED = {
    "getenv": "reads the server's environment",
    "kv_store_get": "shares state between tenants",
    "kv_store_put": "shares state between tenants",
    "kv_store_del": "shares state between tenants",
    "proc_dict_get": "keeps state between messages",
    "proc_dict_put": "keeps state between messages",
    "proc_dict_del": "keeps state between messages",
    "jq": "is not offered here",
    "term_encode": "is Erlang-specific",
    "term_decode": "is Erlang-specific",
    "mongo_date": "is for EMQX's MongoDB action",
}


def _unknown_function_message(name: str) -> str:
    reason = _NOT_OFFERED.get(name.lower())
    if reason:
        return f"function {name}() is not available in rules: it {reason}"
    return f"unknown function {name}(): see docs/rules.md for the functions rules may call"


def parse(sql: str, functions: dict[str, tuple[int, int | None]]) -> Statement:
    """Parse one rule; raise RuleSyntaxError with the problem and its position."""
    if not isinstance(sql, str) or not sql.strip():
        raise RuleSyntaxError("SQL is empty.")
    if len(sql) > MAX_SQL_CHARS:
        raise RuleSyntaxError(f"SQL is longer than {MAX_SQL_CHARS} characters.")
    _check_nested_statements(sql)
    try:
        tree = _parser().parse(sql)
    except UnexpectedInput as exc:
        raise _explain(sql, exc) from None
    try:
        statement: Statement = _ToAst(sql, functions).transform(tree)
        return statement
    except RuleSyntaxError:
        raise
    except RecursionError:
        raise RuleSyntaxError("the rule is nested too deeply") from None
    except Exception as exc:  # lark wraps transformer errors in VisitError
        orig = getattr(exc, "orig_exc", None)
        if isinstance(orig, RuleSyntaxError):
            raise orig from None
        raise


_STATEMENT_WORD = re.compile(r"(?<![.\w])(select|foreach)\b", re.IGNORECASE)


def _blank_literals(sql: str) -> str:
    """The SQL with string literals' and comments' contents blanked (positions kept)."""
    out = list(sql)
    quote: str | None = None
    i = 0
    while i < len(sql):
        char = sql[i]
        if quote:
            if char == quote:
                quote = None
            else:
                out[i] = " " if char != "\n" else "\n"
        elif char in "'\"":
            quote = char
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            end = len(sql) if end < 0 else end
            for j in range(i, end):
                out[j] = " "
            i = end
            continue
        i += 1
    return "".join(out)


def _check_nested_statements(sql: str) -> None:
    """A second SELECT/FOREACH is a subquery or a second statement: neither exists here."""
    blank = _blank_literals(sql)
    words = list(_STATEMENT_WORD.finditer(blank))
    depth = deepest = 0
    for char in blank:
        if char in "([":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]":
            depth -= 1
    if deepest > MAX_NESTING:
        raise RuleSyntaxError(f"expressions nest deeper than {MAX_NESTING} levels")
    tick = blank.find("`")
    if tick >= 0:
        line, column = _position(sql, tick)
        raise RuleSyntaxError(
            "backticks are not allowed: quote topic filters and columns with double quotes "
            "and strings with single quotes",
            line,
            column,
        )
    if not words or words[0].start() != _first_token_pos(sql):
        return  # not a rule at all: the parser says what it starts with
    for match in words[1:]:
        line, column = _position(sql, match.start())
        before = _previous_char(blank, match.start())
        if before == ";":
            raise RuleSyntaxError("only one statement is allowed", line, column)
        if before == "(":
            raise RuleSyntaxError("subqueries are not allowed in a rule", line, column)


def _explain(sql: str, exc: UnexpectedInput) -> RuleSyntaxError:
    """A lark error as a message about the rule, not about the grammar."""
    line, column = exc.line, exc.column
    if isinstance(exc, UnexpectedCharacters):
        at = exc.pos_in_stream if exc.pos_in_stream is not None else len(sql)
        char = sql[at] if at < len(sql) else ""
        if char == "`":
            return RuleSyntaxError(
                "backticks are not allowed: quote topic filters and columns with double quotes "
                "and strings with single quotes",
                line,
                column,
            )
        if char in "'\"":
            return RuleSyntaxError(f"Unterminated string: missing closing {char}", line, column)
        if char == ";":
            return RuleSyntaxError("only one statement is allowed: remove ';'", line, column)
        paren = _paren_problem(sql)
        if paren:
            return paren
        return RuleSyntaxError(f"unexpected character {char!r}", line, column)
    paren = _paren_problem(sql)
    if isinstance(exc, UnexpectedEOF):
        if paren:
            return paren
        return RuleSyntaxError(
            'the rule ends too early: expected SELECT <fields> FROM "<topic filter>" '
            "[WHERE <condition>]",
            line if line and line > 0 else None,
            column if column and column > 0 else None,
        )
    assert isinstance(exc, UnexpectedToken)
    token = exc.token
    text = str(token)
    upper = text.upper()
    expected = set(exc.expected or ())
    if token.type == "$END":
        if paren:
            return paren
        return RuleSyntaxError(
            f"the rule ends too early: expected {_describe(expected, sql)}", line, column
        )
    if _previous_char(sql, token.start_pos) == ";":
        return RuleSyntaxError("only one statement is allowed", line, column)
    if exc.state == 0 or (token.start_pos == _first_token_pos(sql)):
        if upper in _FOREIGN_WORDS:
            return RuleSyntaxError(f"{upper} is not allowed in a rule", line, column)
        return RuleSyntaxError(
            f"A rule must start with SELECT or FOREACH, got {text!r}", line, column
        )
    if upper in ("SELECT", "FOREACH") and "SEMICOLON" not in expected:
        if _previous_char(sql, token.start_pos) == ";":
            return RuleSyntaxError("only one statement is allowed", line, column)
        return RuleSyntaxError("subqueries are not allowed in a rule", line, column)
    if upper in _FOREIGN_WORDS:
        return RuleSyntaxError(f"{upper} is not allowed in a rule", line, column)
    if "DQSTRING" in expected and "SQSTRING" in expected and "NUMBER" not in expected:
        if text == "(":
            return RuleSyntaxError("subqueries are not allowed in FROM", line, column)
        return RuleSyntaxError(
            'FROM expects topic filters in double quotes, e.g. FROM "sensors/+/temp" or '
            f'FROM "$events/client_connected"; got {text!r}',
            line,
            column,
        )
    if paren:
        return paren
    return RuleSyntaxError(
        f"unexpected {text!r}: expected {_describe(expected, sql)}", line, column
    )


def _first_token_pos(sql: str) -> int:
    stripped = re.match(r"(?:\s|--[^\n]*)*", sql)
    return stripped.end() if stripped else 0


def _previous_char(sql: str, pos: int) -> str:
    before = sql[:pos].rstrip()
    return before[-1:] if before else ""


_TERMINAL_NAMES = {
    "COMMA": "','",
    "RPAR": "')'",
    "LPAR": "'('",
    "RSQB": "']'",
    "LSQB": "'['",
    "DOT": "'.'",
    "SEMICOLON": "';'",
    "NAME": "a name",
    "NUMBER": "a number",
    "SQSTRING": "a 'string'",
    "DQSTRING": 'a "quoted name"',
    "COMP_OP": "a comparison",
    "ADD_OP": "an operator",
    "MUL_OP": "an operator",
    "STAR": "*",
    "__ANON_0": "'..'",
}
# What may start an expression: when all of these fit, say "an expression".
_EXPRESSION_START = {"NAME", "NUMBER", "SQSTRING", "DQSTRING", "LPAR", "LSQB", "CASE"}
_EXPRESSION_NOISE = {"MINUS", "PLUS", "TRUE", "FALSE", "NOT"}


def _describe(expected: set[str], sql: str = "") -> str:
    expected = {name for name in expected if name != "$END"}
    if _first_word(sql) == "SELECT":
        expected -= {"DO", "INCASE"}  # FOREACH's clauses, not SELECT's
    if expected == {"DQSTRING", "SQSTRING"}:
        return 'a topic filter in double quotes, e.g. "sensors/+/temp"'
    names: list[str] = []
    if _EXPRESSION_START <= expected:
        names.append("an expression")
        expected -= _EXPRESSION_START | _EXPRESSION_NOISE
    names += sorted({_TERMINAL_NAMES.get(name, name) for name in expected})
    if not names:
        return "the end of the rule"
    if len(names) > 8:
        names = names[:8] + ["..."]
    return ", ".join(names)


def _first_word(sql: str) -> str:
    match = re.match(r"(?:\s|--[^\n]*)*([A-Za-z]+)", sql)
    return match.group(1).upper() if match else ""


def _paren_problem(sql: str) -> RuleSyntaxError | None:
    """Unbalanced parentheses outside strings, with the position of the culprit."""
    stack: list[int] = []
    quote: str | None = None
    i = 0
    while i < len(sql):
        char = sql[i]
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "-" and sql.startswith("--", i):
            end = sql.find("\n", i)
            i = len(sql) if end < 0 else end
            continue
        elif char == "(":
            stack.append(i)
        elif char == ")":
            if not stack:
                line, column = _position(sql, i)
                return RuleSyntaxError("Unbalanced parentheses: ')' without '('", line, column)
            stack.pop()
        i += 1
    if stack:
        line, column = _position(sql, stack[-1])
        return RuleSyntaxError("Unbalanced parentheses: '(' is never closed", line, column)
    return None


def _position(sql: str, offset: int) -> tuple[int, int]:
    line = sql.count("\n", 0, offset) + 1
    column = offset - (sql.rfind("\n", 0, offset) + 1) + 1
    return line, column

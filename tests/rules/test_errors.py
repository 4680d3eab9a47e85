"""Compile-time errors name the problem and where; what an attacker might try is refused by
construction (the grammar has no way to say it), with a message saying so."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.rules import RuleSyntaxError, compile_rule
from tenants.rules.sql import RuleSqlError, validate_rule_sql


def compile_error(sql: str) -> RuleSyntaxError:
    with pytest.raises(RuleSyntaxError) as caught:
        compile_rule(sql)
    return caught.value


POSITIONED = [
    # (sql, words in the message, line, column)
    ('SELEC * FROM "a"', "must start with SELECT", 1, 1),
    ("SELECT * FROM a/b", "double quotes", 1, 15),
    ('SELECT * FROM "a/#/b"', "Invalid topic filter", 1, 15),
    ('SELECT * FROM "a/b+"', "'+' must occupy a whole level", 1, 15),
    ('SELECT * FROM ""', "topic filter is empty", 1, 15),
    ('SELECT * FROM "a" WHERE x = \'open', "Unterminated string", 1, 29),
    ('SELECT count( FROM "a"', "Unbalanced parentheses", 1, 13),
    ('SELECT (1 + 2)) AS x FROM "a"', "Unbalanced parentheses", 1, 15),
    ('SELECT * FROM "a" WHERE', "ends too early", 1, 19),
    ('SELECT FROM "a"', "unexpected", 1, 8),
    ('SELECT a, FROM "a"', "unexpected", 1, 11),
    ('SELECT nosuch(1) FROM "a"', "unknown function nosuch()", 1, 8),
    ('SELECT upper(1, 2) FROM "a"', "upper() takes 1 argument", 1, 8),
    ('SELECT substr() FROM "a"', "substr() takes 2 to 3 arguments", 1, 8),
    ('SELECT *\nFROM "t/#"\nWHERE payload.x == 1', "unexpected", 3, 18),
    ('SELECT *\nFROM "t/#"\nWHERE x = 1 ORDER BY x', "ORDER is not allowed", 3, 13),
    ('SELECT 1 AS a[1.5] FROM "t"', "integer", 1, 15),
    ('FOREACH * FROM "t"', "FOREACH needs an expression", None, None),
    ("SELECT * FROM", "expected a topic filter in double quotes", 1, 10),
    ('SELECT * FROM "t" WHERE x = 1 AND', "expected an expression", 1, 31),
    ('SELECT * "t"', "expected ',', FROM", 1, 10),
    ('SELECT * FROM "t" WHERE x IN 1', "expected '('", 1, 30),
]


@pytest.mark.parametrize("sql, words, line, column", POSITIONED)
def test_errors_name_the_problem_and_where(sql, words, line, column):
    err = compile_error(sql)
    assert words in err.message
    assert (err.line, err.column) == (line, column)
    if line is not None:
        assert str(err).startswith(f"line {line}, column {column}: ")


ATTACKS = [
    ('SELECT * FROM "a" UNION SELECT * FROM "b"', "UNION is not allowed"),
    ('SELECT * FROM "a" UNION ALL SELECT * FROM "b"', "UNION is not allowed"),
    ('SELECT * FROM "a" JOIN "b"', "JOIN is not allowed"),
    ('SELECT * FROM "a", archive', "double quotes"),
    ("SELECT * FROM archive", "double quotes"),
    ("SELECT * FROM tenant_other.messages", "double quotes"),
    ("SELECT * FROM parquet.`/data/archive/tenant=other`", "backticks"),
    ('SELECT `payload` FROM "a"', "backticks"),
    ('SELECT * FROM (SELECT * FROM "a")', "subqueries are not allowed"),
    ('SELECT * FROM "a" WHERE clientid IN (SELECT clientid FROM "b")', "subqueries"),
    ('SELECT (SELECT 1 FROM "b") AS x FROM "a"', "subqueries"),
    ('SELECT * FROM "a"; DROP TABLE rules', "only one statement"),
    ('SELECT * FROM "a"; SELECT * FROM "b"', "only one statement"),
    ('DELETE FROM "a"', "DELETE is not allowed"),
    ('DROP TABLE "a"', "DROP is not allowed"),
    ('INSERT INTO x SELECT * FROM "a"', "INSERT is not allowed"),
    ('WITH t AS (SELECT 1) SELECT * FROM "a"', "WITH is not allowed"),
    ("SELECT reflect('java.lang.Runtime', 'getRuntime') FROM \"a\"", "unknown function reflect()"),
    (
        "SELECT java_method('java.lang.System', 'exit', 0) FROM \"a\"",
        "unknown function java_method()",
    ),
    ('SELECT input_file_name() FROM "a"', "unknown function input_file_name()"),
    ("SELECT * FROM \"a\" WHERE read_files('/etc/passwd') = 1", "unknown function read_files()"),
    ('SELECT current_user() FROM "a"', "unknown function current_user()"),
    ("SELECT getenv('AWS_SECRET_ACCESS_KEY') FROM \"a\"", "reads the server's environment"),
    ("SELECT kv_store_get('k') FROM \"a\"", "shares state between tenants"),
    ("SELECT * FROM \"a\" WHERE clientid = 'x' OR 1=1 --' AND tenant = 'me'", None),
    ('SELECT * FROM "a" /* comment */', "unexpected"),
    ('SELECT * FROM "../../other-tenant/#"', None),
    ("SELECT 'x' FROM \"a\" WHERE topic = 'a'' UNION SELECT 1 --'", None),
]


@pytest.mark.parametrize("sql, words", ATTACKS)
def test_attacker_sql_is_refused_or_harmless(sql, words):
    if words is None:
        # Valid dialect: it still reads only its own FROM filters, evaluated by this library on
        # the tenant's own rows (the quote tricks are just string contents).
        rule = compile_rule(sql)
        assert all(not s.startswith("$") or s.startswith("$events/") for s in rule.sources)
        assert "UNION" not in "".join(rule.topic_filters)
        return
    assert words in compile_error(sql).message


def test_a_rule_cannot_reach_other_rows_than_from_says():
    rule = compile_rule('SELECT * FROM "../../other-tenant/#"')
    assert rule.topic_filters == ("../../other-tenant/#",)
    # A topic filter is a topic filter: it matches topics of the tenant's own archive only.
    assert not rule.reads("message.publish", "other-tenant/x")
    assert rule.reads("message.publish", "../../other-tenant/x")


def test_huge_sql_is_refused_quickly():
    err = compile_error("SELECT " + "a, " * 20_000 + 'b FROM "t"')
    assert "longer than" in err.message


def test_deep_nesting_is_an_error_not_a_crash():
    assert (
        "nest deeper"
        in compile_error("SELECT " + "(" * 400 + "1" + ")" * 400 + ' AS x FROM "t"').message
    )
    long_chain = "SELECT " + " + ".join(["1"] * 2000) + ' AS x FROM "t"'
    try:
        rule = compile_rule(long_chain)
    except RuleSyntaxError as err:
        assert "nested too deeply" in err.message
    else:
        assert rule.apply({"event": "message.publish", "topic": "t", "ts": 0}).outputs == [
            {"x": 2000}
        ]
    nested = "SELECT " + "(" * 60 + "1" + ")" * 60 + ' AS x FROM "t"'
    assert compile_rule(nested).apply({"topic": "t", "ts": 0}).outputs == [{"x": 1}]


def test_keywords_are_case_insensitive_and_strings_keep_their_case():
    rule = compile_rule("sElEcT 'MiXeD' aS v fRoM \"T/#\" wHeRe qos = 0")
    assert rule.topic_filters == ("T/#",)


def test_validate_rule_sql_returns_filters_and_positions():
    assert validate_rule_sql('SELECT * FROM "a/+", "b/#", "$events/client_connected"') == [
        "a/+",
        "b/#",
    ]
    with pytest.raises(RuleSqlError) as caught:
        validate_rule_sql('SELECT * FROM "a" WHERE nosuch(x)')
    err = caught.value
    assert (err.line, err.column) == (1, 25)
    assert str(err) == "line 1, column 25: " + err.message
    assert "nosuch" in err.message


_PIECES = st.sampled_from(
    [
        "SELECT",
        "FOREACH",
        "DO",
        "INCASE",
        "FROM",
        "WHERE",
        "AS",
        "AND",
        "OR",
        "NOT",
        "IN",
        "CASE",
        "WHEN",
        "THEN",
        "ELSE",
        "END",
        "*",
        ",",
        "(",
        ")",
        "[",
        "]",
        ".",
        "..",
        "=",
        "<>",
        "=~",
        "+",
        "-",
        "/",
        "div",
        "mod",
        "'s'",
        "'",
        '"t/#"',
        '"',
        "payload",
        "x",
        "1",
        "-0",
        "2.5",
        "upper",
        "nosuch",
        ";",
        "--c\n",
        "`",
        "$events/client_connected",
        '"$events/client_connected"',
        "UNION",
        " ",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_PIECES, max_size=25).map(" ".join))
def test_any_text_compiles_or_gets_a_syntax_error(sql):
    try:
        rule = compile_rule(sql)
    except RuleSyntaxError as err:
        assert err.message
        return
    result = rule.apply({"event": "message.publish", "topic": "t/a", "ts": 0, "payload": b"{}"})
    assert result.matched in (True, False)

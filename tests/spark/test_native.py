"""Rules compiled to native Spark (`spark/rules/native.py`) against the Python evaluator, the dry
run's semantics: the same tables of rules × messages through both, results compared row by row
(status, outputs parsed with their JSON types, error, units). Also: which rules do compile, that a
native rule over well-formed payloads leaves nothing to Python, and hypothesis payloads through
EMQX's comparisons."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.archive.schema import ARCHIVE_SCHEMA
from common.rules.dry_run import dry_run
from common.rules.errors import RuleRuntimeError
from spark.rules.plan import PENDING, Evaluator, RulePlan, RuleSpec, rule_outputs
from tests.rules.test_dialect import CASES
from tests.spark.conftest import message

RULES = [
    'SELECT * FROM "t/#" WHERE payload.temp > 90',
    'SELECT payload.a AS a FROM "t/#" WHERE payload.a = 2',
    "SELECT * FROM \"t/#\" WHERE payload.s = 'x'",
    "SELECT * FROM \"t/+/c\" WHERE payload.n.m >= 5 AND topic = 't/b/c'",
    "SELECT * FROM \"t/#\" WHERE topic =~ 't/+/x' OR payload.v < 0",
    'SELECT * FROM "t/#" WHERE NOT payload.k = 1',
    "SELECT payload.x AS x, clientid FROM \"t/#\" WHERE topic = 't/none'",
    'SELECT payload.temp FROM "t/#" WHERE payload.temp > 1',
    'SELECT * FROM "t/#" WHERE 10 < payload.temp',
    'SELECT * FROM "#" WHERE payload.big > 9007199254740992',
    'SELECT payload.site.id AS site, payload.temp AS temp FROM "t/#" '
    "WHERE payload.temp > 90 AND payload.site.id = 7",
    'SELECT upper(payload.s) AS u FROM "t/#" WHERE payload.temp > 90',
    "SELECT * FROM \"t/#\" WHERE payload.x = 1 AND topic = 't/a'",
    'SELECT * FROM "t/#" WHERE payload.a.b = 1',
    'SELECT * FROM "t/#" WHERE payload.temp <= 90.5 OR payload.temp >= 1000',
    "SELECT * FROM \"t/#\" WHERE payload.s = '2'",
    'SELECT * FROM "t/#" WHERE payload.temp = 95',
    # whole rules, natively
    'SELECT payload.temp AS t, topic, qos, clientid, username, timestamp FROM "t/#" '
    "WHERE payload.temp != 10 AND qos = 1",
    'SELECT payload.l[1] AS first, payload.l[-1] AS last FROM "t/#" WHERE payload.l[2] > 1',
    "SELECT payload AS p FROM \"t/#\" WHERE payload.s IN ('x', 'y') OR payload.a NOT IN (2, 3)",
    "SELECT payload.temp AS t FROM \"t/#\" WHERE payload.temp IN (95, 90.5, '95')",
    "SELECT payload.s AS s FROM \"t/#\" WHERE payload.s > 'w' AND payload.s <= 'x'",
    "SELECT payload.temp AS t FROM \"t/#\" WHERE payload.temp = 'true' OR payload.temp = 'null'",
    "SELECT payload.temp AS t FROM \"t/#\" WHERE payload.temp < 'zzz'",
    "SELECT clientid FROM \"t/#\" WHERE username = 'acme/dev' OR clientid <> 'dev'",
    'SELECT payload.n AS n FROM "t/#" WHERE payload.n.m > 4 OR NOT payload.n.m < 100',
    'SELECT topic FROM "t/#" WHERE timestamp > 1700000000050 AND qos IN (0, 1)',
    # values as conditions: only the atom true holds; under NOT, only the atom false
    'SELECT payload.temp AS t FROM "t/#" WHERE payload.temp',
    'SELECT payload.temp AS t FROM "t/#" WHERE NOT payload.temp OR payload.n.m',
    'SELECT clientid FROM "t/#" WHERE qos OR NOT username OR payload',
    'SELECT payload.a AS a FROM "t/#" WHERE NOT (NOT payload.a.b) AND payload.l[1]',
]
PAYLOADS = [
    {"temp": 95},
    {"temp": 10},
    {"temp": "95"},
    {"temp": "abc"},
    {"temp": True},
    {"temp": False},
    {"a": {"b": True}, "l": [True]},
    {"n": {"m": True}},
    {"temp": None},
    {"temp": 90.0000000001},
    {"temp": 90.5},
    {"temp": 95.0},
    {"a": "2"},
    {"a": 2},
    {"a": 2.0},
    {"a": 3},
    {"s": "x"},
    {"s": "y"},
    {"s": 2},
    {"n": {"m": 5}},
    {"n": {"m": 4.9999999999}},
    {"n": '{"m": 7}'},
    {"n": 3},
    {"v": -1},
    {"k": 1},
    {"k": 2},
    {},
    {"big": 9007199254740993},
    {"big": 9007199254740992},
    {"site": {"id": 7}, "temp": 91},
    {"site": {"id": "7"}, "temp": 91},
    {"site": {"id": 8}, "temp": 91},
    {"a": {"b": 1}},
    {"a": '{"b": 1}'},
    {"a": '{"b": 2}'},
    {"x": 1},
    {"l": [1, 2, 3]},
    {"l": [5]},
    {"l": ["1", "2.5"]},
    {"l": "[1, 2]"},
    {"temp": 1e20},
    {"temp": 12345678901234567890},
    {"temp": "1.5e3"},
    {"temp": "+7"},
    {"temp": [1]},
    {"temp": {"a": 1}},
    {"s": "é\u2028"},
    {"temp": "\ud800"},  # a lone surrogate (json.dumps escapes it): Python keeps the code point
    {"s": "x\udc00"},
    {"temp": "\ud83d\ude00"},  # an escaped pair: one character
    b"[1, 2]",
    b'"{\\"temp\\": 95}"',
    b"not json",
    b"\xff\xfe{}",
    b'{"temp": 95, "temp": 10}',
    b'{"temp": NaN}',
    b'{"temp": 95,}',
    b"{'temp': 95}",
    b'  \n {"temp": 1}',
    b'{"temp": 1e400}',
    b'{"temp": 1E2}',
    b'{"temp": 2.50}',
    b'{"temp": -0.0}',
    b'{"s": "x\ty"}',
    b'\xef\xbb\xbf{"temp": 95}',
    b"",
    b"null",
    b"95",
]
TOPICS = ["t/a", "t/b/c", "t/z/x", "u/1", "$SYS/t"]


def typed(value: Any) -> Any:
    """A JSON value with its Python types kept apart (1 is not 1.0, True is not 1)."""
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, typed(v)) for k, v in value.items())))
    if isinstance(value, list):
        return ("list", tuple(typed(v) for v in value))
    return (type(value).__name__, value)


def key(result: dict) -> tuple:
    outputs = result["outputs"]
    return (
        result["rule_id"],
        result["tenant"],
        result["ts"] if isinstance(result["ts"], int) else _ms(result["ts"]),
        result["status"],
        typed(json.loads(outputs)) if outputs is not None else None,
        result["error"],
        result["units"],
    )


def _ms(value) -> int:
    return round(value.timestamp() * 1000)


def evaluator_results(data: pa.Table, rules: list[RuleSpec]) -> list[tuple]:
    evaluator = Evaluator(
        [(s.id, s.tenant, s.sql, s.client_prefix, None, s.name) for s in rules], 1e9
    )
    out = []
    for batch in data.to_batches(max_chunksize=100_000):
        out += [key(r) for r in evaluator.batch(batch).to_pylist()]
    return sorted(out, key=repr)


def plan_results(spark, data: pa.Table, rules: list[RuleSpec]) -> list[tuple]:
    frame = frame_of(spark, data)
    return sorted((key(r.asDict()) for r in rule_outputs(frame, rules).collect()), key=repr)


def frame_of(spark, data: pa.Table):
    """The rows as Spark reads them from the archive (Arrow, no pandas: a column with a NULL
    stays an integer)."""
    return spark.createDataFrame(data).select(*ARCHIVE_SCHEMA.names)


def table() -> pa.Table:
    rows, ts = [], 1_700_000_000_000
    for topic in TOPICS:
        for payload in PAYLOADS:
            body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            ts += 1
            client = "dev" if ts % 3 else "other-dev"
            rows.append(message("acme", topic, body, ts, client_id=client, qos=ts % 2))
    ts += 1  # a rule's own republished output: never a result of that rule
    rows.append(message("acme", "t/a", {"temp": 95}, ts, client_id="$rules-1-x"))
    ts += 1
    rows.append(message("other", "t/a", {"temp": 95}, ts))  # another tenant's: never read
    return pa.Table.from_pylist(rows, schema=ARCHIVE_SCHEMA)


def specs() -> list[RuleSpec]:
    return [RuleSpec(i + 1, "acme", f"r{i + 1}", sql) for i, sql in enumerate(RULES)]


@pytest.fixture(scope="module")
def data() -> pa.Table:
    return table()


def test_native_plan_gives_the_evaluators_results_on_the_case_table(spark, data):
    rules = specs()
    expected = evaluator_results(data, rules)
    got = plan_results(spark, data, rules)
    assert len(expected) > 1500
    assert got == expected


def test_which_rules_compile_to_native_spark(spark, data):
    plan = RulePlan(frame_of(spark, data), specs())
    python_only = {i + 1 for i, sql in enumerate(RULES) if (i + 1) not in plan.native}
    # a path output with no alias, an integer literal beyond 2^53, a function: left to Python
    assert python_only == {8, 10, 12}


def test_rows_left_to_python_are_only_those_native_cannot_be_sure_of(spark, data):
    plan = RulePlan(frame_of(spark, data), specs())
    statuses = plan.answered(pending=True).groupBy("status").count().collect()
    by_status = {r["status"]: r["count"] for r in statuses}
    # most (rule, row) pairs are answered natively, even on this table of odd payloads; `*`
    # outputs, the non-native rules and the payloads native cannot be sure of go to Python
    assert by_status["skipped"] + by_status["passed"] > by_status[PENDING] > 0
    assert by_status["passed"] > 0


def test_a_whole_native_rule_over_well_formed_payloads_runs_no_python(spark):
    rows = [
        message("acme", f"t/{i % 7}", {"temp": i % 100 + 0.5, "site": {"id": i % 10}}, 1000 + i)
        for i in range(500)
    ]
    data = pa.Table.from_pylist(rows, schema=ARCHIVE_SCHEMA)
    sql = (
        'SELECT payload.site.id AS site, payload.temp AS temp FROM "t/#" '
        "WHERE payload.temp > 90 AND payload.site.id = 7"
    )
    rules = [RuleSpec(1, "acme", "r", sql)]
    plan = RulePlan(frame_of(spark, data), rules)
    assert plan.undecided().count() == 0
    assert plan.answered().count() == 500
    got = plan_results(spark, data, rules)
    assert got == evaluator_results(data, rules)
    assert sum(1 for r in got if r[3] == "passed") == 5


def dialect_table(cases_a_tenant: int = 1) -> tuple[pa.Table, list[RuleSpec]]:
    """The dialect's case table (tests/rules/test_dialect.py) as archived messages and rules:
    case i's message and rule in tenant `case{i // cases_a_tenant}`."""
    rows, rules = [], []
    for index, (sql, row, _expected) in enumerate(CASES):
        tenant = f"case{index // cases_a_tenant}"
        pairs = [
            p if isinstance(p, dict) else {"key": p[0], "value": p[1]}
            for p in row.get("user_properties") or ()
        ]
        rows.append(
            {**row, "tenant": tenant, "ts": 1_700_000_000_000 + index, "user_properties": pairs}
        )
        rules.append(RuleSpec(index + 1, tenant, f"c{index}", sql))
    return pa.Table.from_pylist(rows, schema=ARCHIVE_SCHEMA), rules


def test_dialect_cases_through_the_native_plan(spark):
    """Every case of the dialect's table (tests/rules/test_dialect.py), each rule over its own
    message as its own tenant, through the plan and through the evaluator."""
    data, rules = dialect_table()
    frame = frame_of(spark, data)
    native = 0
    for start in range(0, len(rules), 60):
        chunk = rules[start : start + 60]
        plan = RulePlan(frame, chunk)
        native += len(plan.native)
        got = sorted((key(r.asDict()) for r in plan.results().collect()), key=repr)
        assert got == evaluator_results(data, chunk)
    assert native >= 25  # the table's plain path/column rules do compile natively


def test_dry_run_and_native_plan_agree(spark, data):
    """The dry run (the API's `POST /rules/test`) on some rows, beside the plan's outputs."""
    rules = [s for s in specs() if s.id in (2, 11, 18, 19, 20, 22)]
    got = {(r[0], r[2]): r for r in plan_results(spark, data, rules) if r[1] == "acme"}
    rows = data.to_pylist()
    checked = 0
    for spec in rules:
        for row in rows[:120]:
            if row["tenant"] != "acme" or row["topic"] != "t/a":
                continue
            context = {
                "topic": row["topic"],
                "payload": row["payload"].decode("utf-8", "replace"),
                "qos": row["qos"],
                "clientid": row["client_id"],
                "username": row["username"],
                "timestamp": _ms(row["ts"]),
            }
            if row["payload"] != context["payload"].encode():
                continue
            result = got.get((spec.id, _ms(row["ts"])))
            try:
                answer = dry_run(spec.sql, context)
            except RuleRuntimeError:
                assert result is not None and result[3] == "failed", (spec.sql, row)
                continue
            if answer.get("match"):
                assert result is not None and result[3] == "passed", (spec.sql, row)
                assert result[4] == typed(answer["outputs"]), (spec.sql, row)
                checked += 1
            elif "error" not in answer:
                assert result is None or result[3] == "skipped", (spec.sql, row)
    assert checked > 10


# -- hypothesis: EMQX's comparisons over generated payloads ----------------------------------------

SCALARS = st.one_of(
    st.integers(min_value=-(2**60), max_value=2**60),
    st.integers(min_value=-20, max_value=20),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.sampled_from([0.5, 2.0, 90.0, 90.5, 1e16, -0.0]),
    st.sampled_from(["2", "2.0", "+2", "-3.5", "1e3", " 2", "abc", "", "x", "true", "null"]),
    st.text(max_size=5),
    st.booleans(),
    st.none(),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2),
        st.dictionaries(st.sampled_from(["a", "b"]), inner, max_size=2).map(json.dumps),
    ),
    max_leaves=4,
)
PAYLOAD = st.dictionaries(st.sampled_from(["a", "b", "c"]), VALUES, max_size=3)
COMPARED = [
    'SELECT payload.a AS a FROM "h/#" WHERE payload.a = 2',
    'SELECT payload.a AS a FROM "h/#" WHERE payload.a > 2',
    'SELECT payload.a AS a FROM "h/#" WHERE payload.a <= 90.5',
    'SELECT payload.a AS a FROM "h/#" WHERE payload.a != 0',
    "SELECT payload.a AS a FROM \"h/#\" WHERE payload.a = '2'",
    "SELECT payload.b AS b FROM \"h/#\" WHERE payload.b < 'm'",
    "SELECT payload.b AS b FROM \"h/#\" WHERE payload.b >= 'true'",
    "SELECT payload.a.b AS x FROM \"h/#\" WHERE payload.a.b > -1 OR payload.c = 'x'",
    'SELECT payload.a[1] AS x, payload.a[-1] AS y FROM "h/#" WHERE NOT payload.a[1] = 1',
    "SELECT payload.c AS c FROM \"h/#\" WHERE payload.c IN (2, 2.0, 'x', '2')",
    'SELECT * FROM "h/#" WHERE payload.b > 1 AND payload.a < 1',
]


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(payloads=st.lists(PAYLOAD, min_size=30, max_size=60))
def test_generated_payloads_compare_as_the_evaluator_does(spark, payloads):
    rows = [
        message("acme", "h/1", json.dumps(p).encode(), 1_700_000_000_000 + i)
        for i, p in enumerate(payloads)
    ]
    data = pa.Table.from_pylist(rows, schema=ARCHIVE_SCHEMA)
    rules = [RuleSpec(i + 1, "acme", f"h{i}", sql) for i, sql in enumerate(COMPARED)]
    assert plan_results(spark, data, rules) == evaluator_results(data, rules)


# -- the pieces the native plan swaps in for costlier equivalents -----------------------------------

FILTERS = ["#", "a/#", "a", "a/b", "+/b", "a/+", "+", "$SYS/#", "/#", "a//#", "a/b/#", "é/#"]
# Punctuation Java's regex reads as syntax (and `\E`, which ended a `\Q` quote): literal here.
FILTERS += ["a.b/+", "+/(x)", "€\\E/+", "$SYS/+", "+/+"]
TOPIC_NAMES = ["", "a", "a/", "a/b", "a/b/c", "ab", "ab/c", "/a", "$SYS", "$SYS/x", "a\nb", "é/x"]
TOPIC_NAMES += ["a.b/x", "aXb/x", "a/(x)", "a/x", "€\\E/1", "a.b/x\n"]


def test_topic_filters_match_as_the_codec_does(spark):
    """`topic_matches` (equality or prefix where the filter has no `+`) against the MQTT matcher
    the evaluator uses, filter by topic."""
    from pyspark.sql import functions as F

    from common.rules.topics import topic_match
    from spark.rules.native import topic_matches

    frame = spark.createDataFrame([(t,) for t in TOPIC_NAMES], "topic string")
    columns = [topic_matches(F.col("topic"), f).alias(f"f{i}") for i, f in enumerate(FILTERS)]
    for row in frame.select("topic", *columns).collect():
        got = [row[f"f{i}"] for i in range(len(FILTERS))]
        assert got == [topic_match(row["topic"], f) for f in FILTERS], row["topic"]


NUMBER_TEXTS = [
    "0",
    "-0",
    "-0.0",
    "7",
    "90.5",
    "2.50",
    "1E2",
    "1e-7",
    "-1.5e300",
    "1e400",
    "-1e400",
    "9007199254740993",
    "12345678901234567890",
    "123456789012345678901234567890123456789012",
    "0.1",
    "0.30000000000000004",
    "1.7976931348623157e308",
    "4.9e-324",
    "2e-400",
    "3.141592653589793238462643383279",
    "-922337203685477580.8",
    "1" + "0" * 38,
]


def test_a_payload_numbers_double_is_the_variant_casts(spark):
    """The stage reads a JSON number's double back from `to_json` (cheaper than
    `try_variant_get(v, '$', 'double')`, which builds a Cast per row): the same double, or NULL
    (never sure) — for every kind of number `parse_json` stores (long, decimal, double)."""
    from pyspark.sql import functions as F

    frame = spark.createDataFrame([(f'{{"n": {t}}}',) for t in NUMBER_TEXTS], "p string")
    value = F.try_variant_get(F.try_parse_json("p"), "$.n", "variant")
    rows = frame.select(
        "p",
        F.schema_of_variant(value).alias("t"),
        F.try_variant_get(value, "$", "double").alias("cast"),
        F.to_json(value).try_cast("double").alias("read"),
    ).collect()
    for row in rows:
        assert row["t"] != "STRING", row
        assert row["read"] is None or row["read"] == row["cast"], row
        # the double compares as Python's float of the same text where Spark reads one
        if row["read"] is not None:
            assert row["read"] == float(json.loads(row["p"])["n"]), row
    assert sum(r["read"] is not None for r in rows) >= len(NUMBER_TEXTS) - 4

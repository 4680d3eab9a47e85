"""The native prefilter of a rule's WHERE (spark/rules/prefilter.py) against the evaluator, the
authority: on a table of dialect cases (EMQX's comparison semantics such as '2' = 2, missing
fields, JSON inside strings, bad JSON, precision edges, SELECT aliases shadowing payload), every
row the prefilter answers natively is one the evaluator skips, and the plan's results with the
prefilter equal the evaluator's row by row."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from common.archive_schema import ARCHIVE_SCHEMA
from spark.rules.plan import Evaluator, RuleSpec, rule_outputs
from spark.rules.prefilter import Stage, skipped_condition
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
]
PAYLOADS = [
    {"temp": 95},
    {"temp": 10},
    {"temp": "95"},
    {"temp": "abc"},
    {"temp": True},
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
    b'{"s": "x\ty"}',
    b'\xef\xbb\xbf{"temp": 95}',
    b"",
]
TOPICS = ["t/a", "t/b/c", "t/z/x", "u/1", "$SYS/t"]


def table() -> pa.Table:
    rows, ts = [], 1_700_000_000_000
    for topic in TOPICS:
        for payload in PAYLOADS:
            body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            ts += 1
            rows.append(message("acme", topic, body, ts, client_id="dev"))
    ts += 1  # a rule's own republished output: never a result of that rule
    rows.append(message("acme", "t/a", {"temp": 5}, ts, client_id="$rules-1-x"))
    ts += 1
    rows.append(message("other", "t/a", {"temp": 5}, ts))  # another tenant's: never read
    return pa.Table.from_pylist(rows, schema=ARCHIVE_SCHEMA)


def specs() -> list[RuleSpec]:
    return [RuleSpec(i + 1, "acme", f"r{i + 1}", sql) for i, sql in enumerate(RULES)]


def key(result: dict) -> tuple:
    return (
        result["rule_id"],
        result["ts"],
        result["status"],
        result["outputs"],
        result["error"],
        result["units"],
    )


@pytest.fixture(scope="module")
def frame(spark):
    data = table()
    return data, spark.createDataFrame(data.to_pandas(), schema=None).select(*ARCHIVE_SCHEMA.names)


def test_rows_answered_natively_are_rows_the_evaluator_skips(frame):
    data, df = frame
    rules = specs()
    truth = Evaluator([(s.id, s.tenant, s.sql, s.client_prefix) for s in rules]).batch(
        data.to_batches(max_chunksize=10_000)[0]
    )
    status = {(r["rule_id"], r["ts"]): r["status"] for r in truth.to_pylist()}
    ts_of = data.column("ts").cast(pa.int64()).to_pylist()
    prefiltered = 0
    for spec in rules:
        stage = Stage()
        condition = skipped_condition(spec.sql, spec.client_prefix, stage)
        if spec.sql.startswith("SELECT upper("):
            assert condition is None  # SELECT may raise: not prefiltered
            continue
        assert condition is not None, spec.sql
        staged = (
            df.select("*", Stage.parsed())
            .select("*", *[expr.alias(name) for name, expr in stage.values.items()])
            .select("*", *[expr.alias(name) for name, expr in stage.leaves.items()])
        )
        flagged = staged.where(condition & (staged.tenant == "acme")).select("ts").collect()
        for row in flagged:
            ts = int(row.ts.timestamp() * 1000)
            got = next(s for (rid, t), s in status.items() if rid == spec.id and _ms(t) == ts)
            assert got == "skipped", (spec.sql, data.to_pylist()[ts_of.index(ts)])
        prefiltered += len(flagged)
    assert prefiltered > 300  # it does prune: most rows of this table are proven skipped


def test_plan_results_with_the_prefilter_equal_the_evaluators(frame):
    data, df = frame
    rules = specs()
    truth = Evaluator([(s.id, s.tenant, s.sql, s.client_prefix) for s in rules]).batch(
        data.to_batches(max_chunksize=10_000)[0]
    )
    expected = sorted((key({**r, "ts": _ms(r["ts"])}) for r in truth.to_pylist()), key=repr)
    got = sorted(
        (
            key({**r.asDict(), "ts": int(r.ts.timestamp() * 1000)})
            for r in rule_outputs(df, rules).collect()
        ),
        key=repr,
    )
    assert got == expected and len(got) > 500


def _ms(value) -> int:
    return int(value.timestamp() * 1000)

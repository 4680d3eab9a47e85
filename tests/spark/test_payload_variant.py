"""The compactor's parsed payloads (`common.archive.variant`) against Spark's own `parse_json`:
for each payload, the stored VARIANT (written with pyarrow, read back by Spark as VARIANT) is the
one `try_parse_json` builds from the same bytes (same JSON text, same types at every level), or
NULL where the encoder declines, and then a reader's `parse_json` fallback decides."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.archive.variant import PAYLOAD_VARIANT, encode_json, variant_column

TEXTS = [
    '{"temp": 95, "site": {"id": 7, "name": "plant"}, "ok": true, "n": null}',
    '{"b": 1, "a": 2, "B": 3, "é": 4, "\U0001f600": 5, "\uffff": 6, "": 7}',
    "[1, -1, 127, 128, -128, -129, 32767, 32768, 2147483647, 2147483648, -9223372036854775808]",
    "[9223372036854775807, 9223372036854775808, -9223372036854775809, 123456789012345678901234]",
    "[1.5, 2.0, -0.0, 0.000, 10.50, 1e5, 1E-5, 2.5e+3, 1e400, -1e400, 1e-400]",
    "[0.1234567890123456789, 12345678901234567890.12345678901234567, 1.00000000000000000000]",
    "[0." + "0" * 40 + "1, " + "9" * 38 + ", 1" + "0" * 36 + ".5]",
    '"a short string"',
    '"' + "x" * 63 + '"',
    '"' + "y" * 64 + '"',
    '"' + "z" * 300 + '"',
    '"esc \\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\ud83d\\ude00"',
    "true",
    "false",
    "null",
    "-0",
    "12",
    '  {"a" : [ ] , "b" : { } }  ',
    json.dumps({f"k{i}": i for i in range(300)}),
    json.dumps(list(range(300))),
    json.dumps({"deep": [[[[[[{"x": [1, {"y": "z" * 70}]}]]]]]]}),
    json.dumps([{"a": 1, "b": 2}, {"b": 3, "c": 4}]),
    # declined: the reader's parse_json decides (these are NULL or not what Python reads)
    '{"a": 1, "a": 2}',
    "NaN",
    '{"a": Infinity}',
    "[1, 2] trailing",
    "{bad json",
    "",
    '"\\ud800 lone"',
    "[" * 100 + "]" * 100,
    "01",
    "[" + "9" * 39 + "]",  # beyond 38 digits: Jackson's double of it is left to Spark
]
DECLINED = {
    "[" + "9" * 39 + "]",
    '{"a": 1, "a": 2}',
    "NaN",
    '{"a": Infinity}',
    "[1, 2] trailing",
    "{bad json",
    "",
    '"\\ud800 lone"',
    "[" * 100 + "]" * 100,
    "01",
}


def _compare(spark, tmp_path, payloads: list[bytes]) -> list:
    """Per payload: (stored JSON, stored types, parse_json's JSON, parse_json's types)."""
    from pyspark.sql import functions as F

    table = pa.table(
        {
            "i": pa.array(range(len(payloads)), pa.int64()),
            "payload": pa.array(payloads, pa.binary()),
            PAYLOAD_VARIANT: variant_column(payloads),
        }
    )
    path = tmp_path / "variant.parquet"
    pq.write_table(table, path)
    frame = spark.read.schema(f"i long, payload binary, {PAYLOAD_VARIANT} variant").parquet(
        f"file://{path}"
    )
    parsed = F.try_parse_json(F.col("payload").cast("string"))
    stored = F.col(PAYLOAD_VARIANT)
    return (
        frame.orderBy("i")
        .select(
            F.to_json(stored).alias("stored"),
            F.schema_of_variant(stored).alias("stored_type"),
            F.to_json(parsed).alias("parsed"),
            F.schema_of_variant(parsed).alias("parsed_type"),
        )
        .collect()
    )


def test_stored_variants_are_what_parse_json_builds(spark, tmp_path):
    payloads = [t.encode() for t in TEXTS] + [b"\xff\xfe not utf-8", '{"é": 1}'.encode()]
    rows = _compare(spark, tmp_path, payloads)
    for payload, row in zip(payloads, rows, strict=True):
        text = payload.decode(errors="replace")
        if text in DECLINED or payload.startswith(b"\xff"):
            assert row["stored"] is None, (text, row)
            continue
        assert row["stored"] is not None, (text, row)
        assert row["stored"] == row["parsed"], (text, row)
        assert row["stored_type"] == row["parsed_type"], (text, row)


def test_an_unparsable_payload_is_stored_as_null():
    assert encode_json(b"{") is None
    assert encode_json(None) is None
    assert encode_json(b'{"a": 1, "a": 1}') is None  # parse_json refuses duplicate keys
    assert encode_json(b'{"a": 1}') is not None


# JSON texts, built as text so that numbers come in every form a payload may hold them.
_NUMBER = st.from_regex(
    r"-?(0|[1-9][0-9]{0,40})(\.[0-9]{1,42})?([eE][+-]?[0-9]{1,3})?", fullmatch=True
)
_SCALAR = (
    st.sampled_from(["null", "true", "false"])
    | _NUMBER
    | st.integers(min_value=-(2**70), max_value=2**70).map(str)
    | st.floats(allow_nan=False, allow_infinity=False).map(json.dumps)
    | st.text(max_size=80).map(json.dumps)
    | st.text(max_size=10).map(lambda t: json.dumps(t, ensure_ascii=False))
)
_JSON = st.recursive(
    _SCALAR,
    lambda inner: (
        st.lists(inner, max_size=6).map(lambda items: "[" + ", ".join(items) + "]")
        | st.dictionaries(st.text(max_size=8), inner, max_size=6).map(
            lambda d: "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in d.items()) + "}"
        )
    ),
    max_leaves=20,
)


@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(st.lists(_JSON, min_size=40, max_size=60))
def test_generated_documents_store_what_parse_json_builds(spark, tmp_path, documents):
    payloads = [d.encode() for d in documents]
    rows = _compare(spark, tmp_path, payloads)
    stored = 0
    for payload, row in zip(payloads, rows, strict=True):
        assert row["parsed"] is not None, payload
        if row["stored"] is None:  # declined (a number beyond 38 digits): parse_json decides
            assert encode_json(payload) is None
            continue
        stored += 1
        assert (row["stored"], row["stored_type"]) == (row["parsed"], row["parsed_type"]), payload
    assert stored >= len(payloads) * 3 // 4


# -- the native plan over history as the compactor writes it --------------------------------------

_MORE_PAYLOADS = [
    {"temp": 90.5, "site": {"id": 7, "name": "p"}},
    {"temp": 90.0, "site": {"id": 7}},
    {"temp": 95.25, "site": {"id": -7}},
    {"temp": -91.5, "a": 2.0, "s": "x"},
    {"temp": 1234567890123.5, "a": 2},
    {"temp": 0.1, "s": "y", "n": {"m": 5.5}},
    {"temp": 91, "site": {"id": 7.0}},
]


def _history_frame(spark, store, data: pa.Table):
    """`data` as history: one live segment, compacted by `compact_hour`, read as a backfill
    reads it (`spark.archive.read_archive`: the stored variant and the typed fields)."""
    from datetime import UTC, datetime

    from common.archive.files import compact_hour, encode_parquet
    from common.archive.schema import live_segment_key
    from spark.archive import read_archive

    first = min(data["ts"].to_pylist())
    first_ms = int(first.timestamp() * 1000)
    store.put(live_segment_key(first_ms, "test", 0), encode_parquet(data))
    hour = datetime.fromtimestamp(first_ms / 1000, UTC).replace(minute=0, second=0, microsecond=0)
    compact_hour(store, hour)
    tenants = sorted(set(data["tenant"].to_pylist()))
    end_ms = int(max(data["ts"].to_pylist()).timestamp() * 1000) + 1
    return read_archive(spark, store, tenants, first_ms, end_ms)


def test_native_plan_over_compacted_history_gives_the_evaluators_results(spark, store):
    """The case table of tests/spark/test_native.py (and more numbers), compacted: the plan
    reads the stored variant and the typed fields, and its results are the evaluator's (the dry
    run's semantics) row for row, as they are over the raw payloads."""
    from common.archive.schema import ARCHIVE_SCHEMA
    from spark.rules.plan import RulePlan, rule_outputs
    from tests.spark.conftest import message
    from tests.spark.test_native import evaluator_results, key, specs, table

    data = table()
    ts = max(data["ts"].to_pylist()).timestamp() * 1000
    extra = [
        message("acme", "t/a", p, int(ts) + i + 1, client_id="dev", qos=1)
        for i, p in enumerate(_MORE_PAYLOADS)
    ]
    data = pa.concat_tables([data, pa.Table.from_pylist(extra, schema=ARCHIVE_SCHEMA)])
    frame = _history_frame(spark, store, data)
    assert PAYLOAD_VARIANT in frame.columns
    assert "payload_fields" in frame.columns  # the common fields came typed
    typed = {f.name for f in frame.schema["payload_fields"].dataType.fields}
    assert {"temp|i", "temp|d1", "temp|s"} <= typed, typed
    rules = specs()
    got = sorted((key(r.asDict()) for r in rule_outputs(frame, rules).collect()), key=repr)
    assert got == evaluator_results(data, rules)
    # and no more (rule, row) pairs are left to Python than over the raw payloads
    from tests.spark.test_native import frame_of

    raw = RulePlan(frame_of(spark, data), rules).undecided().count()
    assert RulePlan(frame, rules).undecided().count() == raw


def test_dialect_cases_over_compacted_history(spark, store):
    """The dialect's case table (tests/rules/test_dialect.py), each case its own tenant and so
    its own history part (every field of its one payload typed), through the plan."""
    from common.archive.schema import ARCHIVE_SCHEMA
    from spark.rules.plan import RulePlan, RuleSpec
    from tests.rules.test_dialect import CASES
    from tests.spark.test_native import evaluator_results, key

    rows, rules = [], []
    for index, (sql, row, _expected) in enumerate(CASES):
        tenant = f"case{index}"
        pairs = [
            p if isinstance(p, dict) else {"key": p[0], "value": p[1]}
            for p in row.get("user_properties") or ()
        ]
        rows.append(
            {**row, "tenant": tenant, "ts": 1_700_000_000_000 + index, "user_properties": pairs}
        )
        rules.append(RuleSpec(index + 1, tenant, f"c{index}", sql))
    data = pa.Table.from_pylist(rows, schema=ARCHIVE_SCHEMA)
    frame = _history_frame(spark, store, data)
    assert "payload_fields" in frame.columns
    for start in range(0, len(rules), 60):
        chunk = rules[start : start + 60]
        got = sorted(
            (key(r.asDict()) for r in RulePlan(frame, chunk).results().collect()), key=repr
        )
        assert got == evaluator_results(data, chunk)

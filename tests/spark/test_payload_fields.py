"""The compactor's typed payload fields (`common.archive.shredding`) against Spark's own
`parse_json`: every typed value is what `try_parse_json` of the same bytes holds at that path,
with that type (and so the native plan may read it instead of parsing); documents Spark could read
otherwise get no typed value at all, and a reader's `parse_json` decides."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.archive.shredding import (
    PAYLOAD_FIELDS,
    shred,
    typed_field_path,
    typed_leaves,
    without_case_twins,
)

TEXTS = [
    '{"temp": 95, "site": {"id": 7, "name": "plant"}, "ok": true, "n": null}',
    '{"b": 1, "a": 2, "B": 3, "é": 4, "\U0001f600": 5, "\uffff": 6, "": 7, "x.y": 8, "p|q": 9}',
    '{"a": -9223372036854775808, "b": 9223372036854775807, "c": 9223372036854775808}',
    '{"a": 1.5, "b": 2.0, "c": -0.0, "d": 0.000, "e": 10.50, "f": 1e5, "g": 1E-5, "h": 2.5e+3}',
    '{"a": 0.1234567890123456789, "b": 12345678901234.5, "c": 123456789012345.6, "d": -0.50}',
    '{"a": "' + "x" * 300 + '", "b": "esc \\" \\\\ \\/ \\b \\n \\u00e9", "c": ""}',
    '{"s": {"t": {"u": {"v": 1}, "w": 2.25}, "x": [1, {"y": 2}]}, "z": [{"a": 1}]}',
    '  {"a" : [ ] , "b" : { } , "c": 3}  ',
    json.dumps({f"k{i}": i for i in range(300)}),
    '{"a": 1e400, "b": 1}',
    "[1, 2, 3]",
    '"a string"',
    "12",
    # no typed value: Spark might read these otherwise (or not at all)
    '{"a": 1, "a": 2}',
    '{"x": {"a": 1, "a": 2}, "b": 1}',
    '{"b": 1, "n": NaN}',
    '{"a": Infinity}',
    '{"a": 1} trailing',
    "{bad json",
    "",
    '{"a": "\\ud800 lone", "b": 1}',
    '{"a": ' + "[" * 70 + "]" * 70 + ', "b": 1}',
    '{"a": 01}',
    '{"b": 1, "a": ' + "9" * 120 + ".5}",
]
UNTYPED = set(TEXTS[TEXTS.index('{"a": 1, "a": 2}') :])


def _compare(spark, tmp_path, payloads: list[bytes]) -> list[tuple[bytes, str, str, dict]]:
    """Per payload and typed column: (payload, column, kind, {typed JSON, parse_json's JSON and
    type at the path})."""
    from pyspark.sql import functions as F

    names = sorted({name for p in payloads for name, _ in typed_leaves(p) or ()})
    names = without_case_twins(names)  # as the compactor keeps them
    fields, _ = shred(payloads, fields=names)
    columns: dict = {"i": pa.array(range(len(payloads)), pa.int64())}
    columns["payload"] = pa.array(payloads, pa.binary())
    if fields is not None:
        columns[PAYLOAD_FIELDS] = fields
    path = tmp_path / "fields.parquet"
    pq.write_table(pa.table(columns), path)
    frame = spark.read.parquet(f"file://{path}")
    parsed = F.try_parse_json(F.col("payload").cast("string"))
    selected = [F.col("i"), F.col("payload")]
    for index, name in enumerate(names):
        keys, _kind = typed_field_path(name)
        at = F.try_variant_get(parsed, "$" + "".join(f"['{k}']" for k in keys), "variant")
        typed = F.col(PAYLOAD_FIELDS).getField(name)
        selected += [
            F.to_json(typed.cast("variant")).alias(f"typed{index}"),
            F.to_json(at).alias(f"parsed{index}"),
            F.schema_of_variant(at).alias(f"type{index}"),
        ]
    out = []
    for row in frame.orderBy("i").select(*selected).collect():
        for index, name in enumerate(names):
            if row[f"typed{index}"] is not None:
                got = {k: row[f"{k}{index}"] for k in ("typed", "parsed", "type")}
                out.append((bytes(row["payload"]), name, typed_field_path(name)[1], got))
    return out


def _agrees(kind: str, got: dict) -> bool:
    """The typed value is parse_json's value at the path, of the kind's type."""
    if got["typed"] != got["parsed"]:
        return False
    if kind == "i":
        return got["type"] in ("TINYINT", "SMALLINT", "INT", "BIGINT")
    if kind == "s":
        return got["type"] == "STRING"
    # Spark keeps a decimal without its trailing zeros (`2.0` is DECIMAL(1,0)): the same number
    scale = re.fullmatch(r"DECIMAL\((\d+),(\d+)\)", got["type"])
    return scale is not None and int(scale.group(2)) <= int(kind[1:])


def test_typed_fields_are_what_parse_json_holds(spark, tmp_path):
    payloads = [t.encode() for t in TEXTS] + [b'{"a": "\xff\xfe not utf-8"}']
    compared = _compare(spark, tmp_path, payloads)
    for payload, name, kind, got in compared:
        assert payload.decode() not in UNTYPED, (payload, name)
        assert _agrees(kind, got), (payload, name, got)
    typed = {(p.decode(), n) for p, n, _, _ in compared}
    for text in UNTYPED:
        assert typed_leaves(text.encode()) is None, text
    assert typed_leaves(b'{"a": "\xff"}') is None
    # what the table covers was typed (so the comparison above compared something)
    first = TEXTS[0]
    assert {(first, "temp|i"), (first, "site.id|i"), (first, "site.name|s")} <= typed
    assert (TEXTS[3], "e|d2") in typed and (TEXTS[3], "b|d1") in typed
    assert (TEXTS[4], "b|d1") in typed and (TEXTS[4], "c|d1") not in typed  # 16 digits
    assert (TEXTS[6], "s.t.w|d2") in typed and (TEXTS[6], "s.t.u.v|i") not in typed  # too deep
    assert (TEXTS[2], "c|i") not in typed  # beyond a long


# Documents over a few keys, so that paths repeat; numbers in every form a payload writes them.
_NUMBER = st.from_regex(
    r"-?(0|[1-9][0-9]{0,20})(\.[0-9]{1,18})?([eE][+-]?[0-9]{1,3})?", fullmatch=True
)
_SCALAR = (
    st.sampled_from(["null", "true", "false"])
    | _NUMBER
    | st.integers(min_value=-(2**70), max_value=2**70).map(str)
    | st.floats(allow_nan=False, allow_infinity=False).map(json.dumps)
    | st.text(max_size=20).map(json.dumps)
    | st.text(max_size=10).map(lambda t: json.dumps(t, ensure_ascii=False))
)
_KEYS = st.sampled_from(["a", "b", "c", "é", "a b"])
_JSON = st.recursive(
    _SCALAR,
    lambda inner: (
        st.lists(inner, max_size=4).map(lambda items: "[" + ", ".join(items) + "]")
        | st.lists(st.tuples(_KEYS, inner), max_size=5).map(
            lambda pairs: "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in pairs) + "}"
        )
    ),
    max_leaves=16,
)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(st.lists(_JSON, min_size=40, max_size=60))
def test_generated_documents_type_what_parse_json_holds(spark, tmp_path, documents):
    payloads = [d.encode() for d in documents]
    for payload, name, kind, got in _compare(spark, tmp_path, payloads):
        assert _agrees(kind, got), (payload, name, got)


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
    reads it (`spark.archive.read_archive`: the typed fields beside the payload)."""
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
    reads the typed fields where they are and parses elsewhere, and its results are the evaluator's (the dry
    run's semantics) row for row, as they are over the raw payloads."""
    from common.archive.schema import ARCHIVE_SCHEMA
    from spark.rules.plan import RulePlan
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
    assert "payload_fields" in frame.columns  # the common fields came typed
    typed = {f.name for f in frame.schema["payload_fields"].dataType.fields}
    assert {"temp|i", "temp|d1", "temp|s"} <= typed, typed
    from tests.spark.test_native import frame_of

    raw = frame_of(spark, data)
    # The rules that read the payload, in one plan (an operator's backfill; a tenant's run of one
    # rule: the S3 test below); the others' results are not typed fields' business
    # (tests/spark/test_native).
    rules = [r for r in specs() if "payload." in r.sql]
    plan = RulePlan(frame, rules)
    typed_read = [c for c in plan.scoped.columns if c.startswith("_f")]
    assert len(typed_read) >= 4, typed_read
    got = _by_rule(key(r.asDict()) for r in plan.results().collect())
    expected = _by_rule(evaluator_results(data, rules))
    for rule in rules:
        assert got.get(rule.id) == expected.get(rule.id), rule.sql
    # and no more rows are left to Python than over the raw payloads
    assert plan.undecided().count() == RulePlan(raw, rules).undecided().count()


def test_dialect_cases_over_compacted_history(spark, store):
    """The dialect's case table (tests/rules/test_dialect.py), eight cases to a tenant and so to
    a history part (every field of their payloads typed), through plans of many rules (an
    operator's backfill of every rule; up to PUSHDOWN_LIMIT a plan): each rule reads its own
    case's row and its neighbours', and gives the evaluator's results."""
    from spark.rules.plan import PUSHDOWN_LIMIT, RulePlan
    from tests.spark.test_native import dialect_table, evaluator_results, key

    # 8 cases a tenant, so a part: each field is in >= 1/8 of its rows, and typed
    data, rules = dialect_table(cases_a_tenant=8)
    frame = _history_frame(spark, store, data)
    assert "payload_fields" in frame.columns
    reading = [r for r in rules if "payload." in r.sql]
    half = -(-len(reading) // 2)
    assert half <= PUSHDOWN_LIMIT
    typed_read = 0
    for plan_rules in (reading[:half], reading[half:]):
        plan = RulePlan(frame, plan_rules)
        typed = [c for c in plan.scoped.columns if c.startswith("_f")]
        assert typed  # paths of kinds typed (not bools, arrays)
        typed_read += len(typed)
        got = _by_rule(key(r.asDict()) for r in plan.results().collect())
        expected = _by_rule(evaluator_results(data, plan_rules))
        for rule in plan_rules:
            assert got.get(rule.id) == expected.get(rule.id), rule.sql
    assert typed_read >= 5, typed_read


def _by_rule(keys) -> dict[int, list[tuple]]:
    """Results (`key` tuples, the rule's id first) by rule, each rule's sorted."""
    out: dict[int, list[tuple]] = {}
    for k in keys:
        out.setdefault(k[0], []).append(k)
    return {rule: sorted(rows, key=repr) for rule, rows in out.items()}


def test_history_on_s3_reads_the_typed_fields(spark, s3_endpoint, monkeypatch):
    """History on S3 (moto's server) is read through `spark.object_source`, not Spark's file
    source: the parts' footers (ranged reads, a second one for a footer longer than the first)
    say which fields are typed, each part gives its own and NULL for the others' (two tenants, so
    two parts typing different fields), and the one-rule plans that read them give the
    evaluator's results."""
    import uuid

    import boto3

    from common.archive import footer
    from common.archive.schema import ARCHIVE_SCHEMA, MESSAGE_ID
    from common.stores.object_store import LocalObjectStore, S3ObjectStore
    from spark.archive import list_archive, read_archive, readable_copy
    from spark.rules.plan import RulePlan, RuleSpec
    from tests.spark.conftest import message
    from tests.spark.test_native import evaluator_results, key

    bucket = f"typed-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    store = S3ObjectStore(bucket, "mqtt", endpoint_url=s3_endpoint)
    monkeypatch.setattr(footer, "FIRST_READ", 64)  # every footer takes its second read
    base = 1_790_000_000_000
    rows = [message("acme", "t/a", p, base + i, qos=1) for i, p in enumerate(_MORE_PAYLOADS)]
    rows += [
        message("beta", "t/b", {"level": i, "site": {"id": i % 3}}, base + 50 + i) for i in range(9)
    ]
    data = pa.Table.from_pylist(rows, schema=ARCHIVE_SCHEMA)
    frame = _history_frame(spark, store, data)
    typed = {f.name for f in frame.schema[PAYLOAD_FIELDS].dataType.fields}
    assert {"temp|d1", "temp|i", "level|i", "site.id|i"} <= typed, typed
    rules = [
        RuleSpec(1, "acme", "hot", 'SELECT payload.temp AS t FROM "t/#" WHERE payload.temp > 90'),
        RuleSpec(2, "beta", "one", 'SELECT payload.level AS l FROM "#" WHERE payload.site.id = 1'),
        RuleSpec(3, "beta", "both", 'SELECT payload.temp AS t, payload.level AS l FROM "#"'),
    ]
    for rule in rules:
        plan = RulePlan(frame, [rule])
        assert any(c.startswith("_f") for c in plan.scoped.columns), rule.sql
        got = sorted((key(r.asDict()) for r in plan.results().collect()), key=repr)
        assert got == evaluator_results(data, [rule]), rule.sql
        assert got, rule.sql

    # A backfill with Spark in local mode reads a local copy instead (`readable_copy`): the same
    # rows, message ids and typed fields; the copy is gone after.
    tenants, end = ["acme", "beta"], base + 100
    listing = list_archive(store, tenants, base, end)
    with readable_copy(spark, store, listing) as copy:
        assert isinstance(copy, LocalObjectStore)
        local = read_archive(spark, copy, tenants, base, end, listing=listing)
        assert local.schema[PAYLOAD_FIELDS] == frame.schema[PAYLOAD_FIELDS]
        columns = [MESSAGE_ID, "topic", "payload", PAYLOAD_FIELDS]
        assert sorted(local.select(columns).collect()) == sorted(frame.select(columns).collect())
    assert not copy.root.exists()

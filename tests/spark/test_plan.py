"""The rule plan on tiny archives (no database): what a rule sees, what it outputs, what it
counts — and, from the attacker's side, what it can never reach."""

from __future__ import annotations

import gzip
import json
import time
from datetime import UTC, datetime

import pytest

from common.archive.files import compact_hour
from common.archive.schema import history_prefix
from spark.archive import read_archive
from spark.rules.plan import FAILED, PASSED, SKIPPED, RuleSpec, compile_specs, rule_outputs
from tests.spark.conftest import message, write_live

HOUR = 3_600_000


def run(spark, store, specs, start, end):
    tenants = {s.tenant for s in specs}
    good, errors = compile_specs(specs)
    frame = read_archive(spark, store, tenants, start, end)
    rows = [r.asDict() for r in rule_outputs(frame, good).collect()] if good else []
    for r in rows:
        r["outputs"] = json.loads(r["outputs"]) if r["outputs"] else None
    return rows, errors


def test_a_rule_over_a_tiny_archive(spark, store):
    now = int(time.time() * 1000)
    write_live(
        store,
        [
            message("acme", "sensors/a/temp", {"temp": 20}, now, client_id="dev-a"),
            message("acme", "sensors/b/temp", {"temp": 31}, now + 1, client_id="dev-b"),
            message("acme", "other/c", {"temp": 99}, now + 2),
        ],
    )
    rule = RuleSpec(
        1,
        "acme",
        "hot",
        'SELECT payload.temp AS t, clientid, topic FROM "sensors/+/temp" WHERE payload.temp > 25',
    )
    rows, errors = run(spark, store, [rule], now - 1000, now + 1000)
    assert errors == {}
    assert sorted(r["status"] for r in rows) == [PASSED, SKIPPED]  # other/c: not in its FROM
    passed = next(r for r in rows if r["status"] == PASSED)
    assert passed["outputs"] == [{"t": 31, "clientid": "dev-b", "topic": "sensors/b/temp"}]
    assert passed["tenant"] == "acme" and passed["units"] == 1


def test_two_tenants_with_the_same_topics_and_rules_never_see_each_other(spark, store):
    now = int(time.time() * 1000)
    # One live segment holds both tenants' rows, as a broker writes it.
    write_live(
        store,
        [
            message("acme", "sensors/t", {"v": "acme-1"}, now),
            message("evil", "sensors/t", {"v": "evil-1"}, now + 1),
            message("acme", "sensors/t", {"v": "acme-2"}, now + 2),
            message("evil", "sensors/t", {"v": "evil-2"}, now + 3),
        ],
    )
    sql = 'SELECT payload.v AS v FROM "sensors/#"'
    acme, evil = RuleSpec(1, "acme", "same", sql), RuleSpec(2, "evil", "same", sql)
    rows, _ = run(spark, store, [acme, evil], now - 1000, now + 1000)
    seen = {(r["rule_id"], o["v"]) for r in rows for o in r["outputs"]}
    assert seen == {(1, "acme-1"), (1, "acme-2"), (2, "evil-1"), (2, "evil-2")}
    # A plan for acme alone does not even read evil's rows.
    frame = read_archive(spark, store, ["acme"], now - 1000, now + 1000)
    assert {r.tenant for r in frame.select("tenant").collect()} == {"acme"}
    only, _ = run(spark, store, [acme], now - 1000, now + 1000)
    assert {o["v"] for r in only for o in r["outputs"]} == {"acme-1", "acme-2"}


def test_the_tenant_and_from_are_pushed_down_to_the_scan(spark, store):
    now = int(time.time() * 1000)
    write_live(store, [message("acme", "sensors/t", {"v": 1}, now)])
    rule = RuleSpec(1, "acme", "r", 'SELECT * FROM "sensors/#"')
    frame = read_archive(spark, store, ["acme"], now - 1000, now + 1000)
    spark.conf.set("spark.sql.maxMetadataStringLength", "100000")  # the whole filter list
    try:
        plan = rule_outputs(frame, [rule])._jdf.queryExecution().executedPlan().toString()
    finally:
        spark.conf.unset("spark.sql.maxMetadataStringLength")
    pushed = plan[plan.index("PushedFilters") :].split("\n")[0]
    assert "tenant" in pushed and "sensors/" in pushed, pushed


def test_failing_rows_count_as_failed_and_other_rules_go_on(spark, store):
    now = int(time.time() * 1000)
    write_live(
        store,
        [
            message("acme", "d/t", {"n": 1}, now),
            message("acme", "d/t", b"{not json", now + 1),
            message("acme", "d/t", {"n": 3}, now + 2),
        ],
    )
    decode = RuleSpec(1, "acme", "decode", 'SELECT json_decode(payload) AS doc FROM "d/#"')
    plain = RuleSpec(2, "acme", "plain", 'SELECT topic FROM "d/#"')
    rows, _ = run(spark, store, [decode, plain], now - 1000, now + 1000)
    by_rule = {1: [], 2: []}
    for r in rows:
        by_rule[r["rule_id"]].append(r["status"])
    assert sorted(by_rule[1]) == [FAILED, PASSED, PASSED]
    assert by_rule[2] == [PASSED] * 3
    failed = next(r for r in rows if r["status"] == FAILED)
    assert failed["error"]


def test_a_rule_that_does_not_compile_is_reported_not_run(spark):
    good, errors = compile_specs(
        [RuleSpec(1, "acme", "ok", 'SELECT * FROM "a"'), RuleSpec(2, "acme", "bad", "SELEC x")]
    )
    assert [s.id for s in good] == [1] and errors[2].startswith("compile:")


# -- the attacker's side -------------------------------------------------------------------------

ATTACKS = [
    'SELECT * FROM "sensors/#" UNION SELECT * FROM "sensors/#"',
    "SELECT * FROM (SELECT * FROM archive) WHERE 1 = 1",
    "SELECT * FROM `archive`",
    "SELECT * FROM parquet.`/etc`",
    'SELECT * FROM "../tenant=evil/#"',
    "SELECT * FROM \"#\" WHERE tenant = 'evil'",
    "SELECT * FROM \"#\" WHERE username = 'evil/dev-1'",
    "SELECT read_files('/etc/passwd') AS x FROM \"#\"",
    "SELECT java_method('java.lang.System', 'getenv') AS x FROM \"#\"",
    "SELECT reflect('java.lang.System', 'getenv') AS x FROM \"#\"",
    'SELECT input_file_name() AS x FROM "#"',
    'SELECT * FROM "sensors/#"; SELECT * FROM tenants_rule',
    'SELECT * FROM "sensors/#" -- \n UNION ALL SELECT * FROM "evil/#"',
    'SELECT * FROM "$share/g/#"',
    'SELECT * FROM "sensors/#" JOIN "evil" ON 1 = 1',
    'SELECT (SELECT payload FROM "#") AS x FROM "#"',
]


@pytest.mark.parametrize("sql", ATTACKS)
def test_rule_text_cannot_reach_another_tenant_a_table_a_file_or_spark(spark, store, sql):
    now = int(time.time() * 1000)
    write_live(
        store,
        [
            message("acme", "sensors/t", {"v": "acme-data"}, now),
            message("evil", "sensors/t", {"v": "EVIL-SECRET"}, now + 1),
            message("evil", "#", {"v": "EVIL-SECRET"}, now + 2),
        ],
    )
    rows, errors = run(spark, store, [RuleSpec(1, "acme", "attack", sql)], now - 1000, now + 1000)
    if errors:
        return  # refused at compile time: nothing ran
    text = json.dumps(rows, default=str)
    assert "EVIL-SECRET" not in text and "root:" not in text and "PATH" not in text
    assert all(r["tenant"] == "acme" for r in rows)
    assert "/etc" not in text and "objects/archive" not in text


# -- the layout protocol -------------------------------------------------------------------------


class ListingStore:
    """The test store, recording which prefixes the reader lists."""

    def __init__(self, inner):
        self.inner, self.listed = inner, []
        self.root, self.url = inner.root, inner.url

    def list(self, prefix=""):
        self.listed.append(prefix)
        return self.inner.list(prefix)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_compacted_hours_read_history_of_the_tenant_only(spark, store):
    hour = (int(time.time() * 1000) // HOUR - 3) * HOUR  # a closed hour
    write_live(
        store,
        [
            message("acme", "s/t", {"v": "acme-compacted"}, hour + 5),
            message("evil", "s/t", {"v": "evil-compacted"}, hour + 6),
        ],
    )
    result = compact_hour(store, datetime.fromtimestamp(hour / 1000, UTC))
    assert result is not None
    # A late upload after compaction is read from its live segment (the marker does not name it).
    write_live(store, [message("acme", "s/t", {"v": "acme-late"}, hour + 7)], writer="late")
    # A version 1 segment of the next hour (gzip'd NDJSON) stays readable.
    old = {"tenant": "acme", "ts": hour + HOUR + 7, "topic": "s/t", "payload": '{"v": "v1"}'}
    store.put(
        history_prefix("acme", hour + HOUR) + "seg-1.ndjson.gz",
        gzip.compress(json.dumps(old).encode() + b"\n"),
    )
    listing = ListingStore(store)
    frame = read_archive(spark, listing, ["acme"], hour, hour + 2 * HOUR)
    payloads = sorted(json.loads(r.payload)["v"] for r in frame.collect())
    assert payloads == ["acme-compacted", "acme-late", "v1"]  # each once, evil's never
    history_listed = [p for p in listing.listed if p.startswith("archive/tenant=")]
    assert history_listed and all(p.startswith("archive/tenant=acme") for p in history_listed)


def test_pushed_down_topic_predicates_never_drop_a_row_the_filter_matches(spark):
    """The push-down is a superset of the MQTT match (the evaluator decides exactly)."""
    from common.rules.topics import topic_match
    from spark.rules.plan import filter_predicate

    topics = ["a", "a/b", "a/b/c", "a//c", "/a", "b/a", "$SYS/a", "a/b/c/d", "ab/c", ""]
    filters = ["a", "a/#", "a/+", "a/+/c", "+/a", "#", "+", "a/b/#", "/+", "+/+/c", "ab/#"]
    frame = spark.createDataFrame([(t,) for t in topics], "topic string")
    for topic_filter in filters:
        predicate = filter_predicate(topic_filter)
        kept = (
            {r.topic for r in frame.where(predicate).collect()}
            if predicate is not None
            else set(topics)
        )
        matched = {t for t in topics if topic_match(t, topic_filter)}
        assert matched <= kept, (topic_filter, matched - kept)


def test_dataset_rows_keep_scalar_types_and_store_the_rest_as_json():
    from spark.rules.actions import dataset_table

    table = dataset_table(
        [{"t": 21, "ok": True, "site": {"id": 7}, "name": "a"}, {"t": 21.5, "name": None}],
        [1_000, 2_000],
    )
    assert table.column_names == ["_ts", "t", "ok", "site", "name"]
    assert table["t"].to_pylist() == [21.0, 21.5]
    assert table["ok"].to_pylist() == [True, None]
    assert table["site"].to_pylist() == ['{"id":7}', None]
    assert table["name"].to_pylist() == ["a", None]


def test_rule_units_are_sized_as_the_broker_meters_messages(spark, store):
    """`rules_triggered` units: payload + topic (UTF-8) + properties as MQTT 5 encodes them, the
    size every other message unit has — checked against the broker's own metering of the same
    messages, archived as the broker archives them, on both evaluation paths (with and without
    the native prefilter)."""
    from common.archive.schema import message_units
    from data_plane.broker.message import Message, metered_size
    from data_plane.storage.archive_rows import publish_rows

    def publish(topic, size, **props):
        return Message.from_publish("acme", "dev-1", topic, b"x" * size, 0, False, props, "dev-1")

    sent = [
        publish("s/é/t", 5100, user_property=[("k" * 10, "v" * 10), ("a", "b")]),  # 1 unit bare
        publish("s/a", 5100, content_type="application/json"),
        publish(
            "s/b",
            5000,
            correlation_data=b"c" * 100,
            response_topic="r/1",
            payload_format_indicator=1,
            message_expiry_interval=60,
        ),
        publish("s/c", 5117),  # 5117 + 3: exactly one unit, no properties
        publish("s/d", 10),
    ]
    expected = [message_units(metered_size(m)) for m in sent]
    bare = [message_units(len(m.payload) + len(m.topic.encode())) for m in sent]
    assert expected != bare  # properties change the units of some of these messages
    now = time.time()
    batch = publish_rows([(now, m) for m in sent])
    rows = batch.to_pylist()
    for row in rows:
        row["ts"] = int(row["ts"].timestamp() * 1000)
    write_live(store, rows)
    start, end = int(now * 1000) - 1000, int(now * 1000) + 1000
    plain = RuleSpec(1, "acme", "all", 'SELECT topic FROM "s/#"')
    filtered = RuleSpec(2, "acme", "some", 'SELECT topic FROM "s/#" WHERE payload.v > 1')
    for specs in ([plain], [plain, filtered]):
        results, errors = run(spark, store, specs, start, end)
        assert errors == {}
        by_rule: dict[int, list[int]] = {}
        for r in results:
            by_rule.setdefault(r["rule_id"], []).append(r["units"])
        assert sorted(by_rule) == sorted(s.id for s in specs)
        for units in by_rule.values():
            assert sorted(units) == sorted(expected)
    # The evaluator's own vectorized sizing (rows evaluated without the native column) agrees.
    from spark.rules.plan import _units

    assert _units(batch).to_pylist() == expected

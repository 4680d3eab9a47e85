"""The rules job's work metered per device (issue 33, point 1): each rule's 5 KiB units by the
publisher of the message it evaluated (its `username`'s device), through the native plan and the
Python evaluator alike, and each action by the device whose message it acted on; the device
segment written beside the usage segment, and again under the same key when a flush is retried."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from common.archive.schema import ARCHIVE_SCHEMA, DEVICE_USAGE_PREFIX, device_of_username
from common.stores.object_store import LocalObjectStore
from spark.rules.backfill import _counts, _native_first_counts
from spark.rules.metering import UsageWriter
from spark.rules.plan import RulePlan, RuleSpec, rule_outputs
from spark.rules.runner import BatchSummary, count, jobs_of
from tests.spark.conftest import message

NATIVE = 'SELECT payload.t AS t FROM "s/#" WHERE payload.t > 20'
PYTHON = 'SELECT * FROM "s/#"'  # `*` outputs are built in Python


def frame(spark):
    rows = [
        message("acme", "s/a", {"t": 10}, 1_000, client_id="sensor-a"),
        message("acme", "s/a", {"t": 30}, 1_001, client_id="sensor-a"),
        message("acme", "s/b", {"t": 40, "pad": "x" * 6_000}, 1_002, client_id="sensor-b"),
    ]
    rows.append({**message("acme", "s/c", {"t": 50}, 1_003, client_id="api"), "username": None})
    return spark.createDataFrame(pa.Table.from_pylist(rows, schema=ARCHIVE_SCHEMA)).select(
        *ARCHIVE_SCHEMA.names
    )


def test_units_by_publisher_native_and_python(spark):
    specs = [RuleSpec(1, "acme", "native", NATIVE), RuleSpec(2, "acme", "py", PYTHON)]
    expected = {"acme/sensor-a": 2, "acme/sensor-b": 2, None: 1}
    for counts in (
        _counts(rule_outputs(frame(spark), specs)),
        _native_first_counts(RulePlan(frame(spark), specs)),
    ):
        by_rule = {c.rule_id: c for c in counts}
        assert by_rule[1].units == by_rule[2].units == 5
        assert by_rule[1].by_user == by_rule[2].by_user == expected


def test_the_tally_and_its_device_segment(spark, tmp_path):
    specs = {1: RuleSpec(1, "acme", "native", NATIVE, actions=[{"type": "dataset", "name": "d"}])}
    results = rule_outputs(frame(spark), list(specs.values())).collect()
    store = LocalObjectStore(tmp_path)
    writer = UsageWriter(store, "rules-backfill")
    tally = writer.new_tally()
    count(_counts(rule_outputs(frame(spark), list(specs.values()))), BatchSummary(), tally)
    assert sum(triggered for triggered, _ in tally.counts.values()) == 5  # the tenant's, as before
    passed = [
        (r.rule_id, r.ts, r.outputs, r.message_id, r.topic, r.client_id, r.username)
        for r in results
        if r.status == "passed"
    ]
    jobs = list(jobs_of(specs, passed))
    assert sorted(j.device for j in jobs) == ["", "sensor-a", "sensor-b"]
    for job in jobs:
        tally.add(job.tenant, actions_executed=1)
        tally.add_device(job.tenant, job.device, actions_executed=1)
    writer.flush(tally)
    writer.flush(tally)  # a retry: the device segment is rewritten, not written twice
    keys = [k for k in store.list(f"{DEVICE_USAGE_PREFIX}/") if k.endswith(".parquet")]
    assert len(keys) == 1
    rows = pq.read_table(store.root / keys[0]).to_pylist()
    assert {r["device"]: (r["rules_triggered"], r["actions_executed"]) for r in rows} == {
        "sensor-a": (2, 1),
        "sensor-b": (2, 1),
        "": (1, 1),
    }


def test_device_of_username():
    assert device_of_username("acme/sensor-a") == "sensor-a"
    assert device_of_username("acme/$rules") == "$rules"
    assert device_of_username(None) == device_of_username("") == ""
    assert json.dumps(device_of_username("acme/a/b")) == '"a/b"'

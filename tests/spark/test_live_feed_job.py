"""The live job's end of the live feed (issue 43): micro-batches of the feed's rows give the same
results as the plan built per batch, and the feed's position moves past a batch only once each
of its actions is done or kept durably."""

from __future__ import annotations

import json
import time

import pyarrow as pa

from common.archive.schema import HISTORY_SCHEMA
from spark.rules.feed import FeedProgress, id_at, spark_table, stream_id
from spark.rules.plan import RuleSpec, _ReusedPlan, collect_outputs, compile_specs, rule_outputs
from tests.spark.conftest import message

SQL = 'SELECT payload.n AS n, clientid FROM "sensors/+/temp" WHERE payload.t > 20'


def feed_rows(rows: list[dict], first: int) -> pa.Table:
    """Rows as the feed carries them: the archive's columns and each row's message id."""
    with_ids = [{**row, "message_id": f"w-1:{first + i}"} for i, row in enumerate(rows)]
    return spark_table([pa.Table.from_pylist(with_ids, schema=HISTORY_SCHEMA)])


def answers(rows: list) -> list[tuple]:
    """Each result as the actions read it (outputs parsed: native and Python space JSON apart)."""
    return sorted(
        (r.rule_id, r.message_id, r.status, r.outputs and json.loads(r.outputs), r.units)
        for r in rows
    )


def test_the_reused_plan_answers_every_batch_as_a_plan_built_for_it(spark):
    specs, errors = compile_specs(
        [
            RuleSpec(1, "acme", "hot", SQL),
            RuleSpec(2, "evil", "hot", SQL),  # the same rule in another tenant: never acme's rows
            RuleSpec(3, "acme", "raw", 'SELECT * FROM "loop/#"'),  # `*`: built in Python
            RuleSpec(4, "acme", "cold", 'SELECT payload.n AS n FROM "#" WHERE payload.t < 0'),
        ]
    )
    assert not errors
    now = int(time.time() * 1000)
    batches = []
    for b in range(4):
        rows = [
            message("acme", "sensors/1/temp", {"n": b * 10 + i, "t": 15 + 3 * i}, now + i)
            for i in range(6)
        ]
        rows.append(message("evil", "sensors/1/temp", {"n": -b, "t": 99}, now))
        rows.append(message("acme", "loop/x", {"n": b}, now))
        rows.append(message("acme", "sensors/2/temp", b"not json \xff", now))  # Python decides
        batches.append(feed_rows(rows, first=100 * b))
    _ReusedPlan._plans.clear()
    for table in batches:
        frame = spark.createDataFrame(table)
        reused = collect_outputs(frame, specs, reuse=True)
        built = rule_outputs(frame, specs).collect()
        assert answers(reused) == answers(built)
        assert {r.tenant for r in reused if r.rule_id == 2} == {"evil"}
    assert not _ReusedPlan.disabled
    assert sorted(key[0] for key in _ReusedPlan._plans) == ["first", "pending"]


def test_the_natives_answers_come_before_the_python_pass(spark):
    """The live job acts on what the native plans answered before the Python pass runs: a
    tenant's native rule waits for no Python rule, its own or another tenant's."""
    from spark.rules.plan import outputs_in_phases
    from spark.rules.results import result_rows

    specs, _ = compile_specs(
        [
            RuleSpec(1, "acme", "hot", SQL),
            RuleSpec(2, "evil", "all", 'SELECT * FROM "#"'),  # no native form: Python
        ]
    )
    now = int(time.time() * 1000)
    rows = [message("acme", "sensors/1/temp", {"n": i, "t": 15 + 3 * i}, now + i) for i in range(4)]
    frame = spark.createDataFrame(feed_rows(rows, first=0))
    first, later = outputs_in_phases(frame, specs, None)
    assert later is None  # no row of evil's: no Python pass at all
    statuses = sorted((r.rule_id, r.status) for t in first for r in result_rows(t))
    assert statuses == [(1, "passed")] * 2 + [(1, "skipped")] * 2
    rows.append(message("evil", "sensors/1/temp", {"n": 9, "t": 99}, now))
    frame = spark.createDataFrame(feed_rows(rows, first=10))
    first, later = outputs_in_phases(frame, specs, None)
    assert {r.rule_id for t in first for r in result_rows(t)} == {1}
    assert later is not None
    assert [(r.rule_id, r.tenant) for t in later() for r in result_rows(t)] == [(2, "evil")]


def test_a_rule_set_over_the_pushdown_limit_reuses_its_python_plan(spark):
    """Over PUSHDOWN_LIMIT rules none is native: the plan is the Python pass alone, and it too is
    built once and reused for each batch (a batch in one partition, as the feed makes small
    ones), answering as a plan built per batch."""
    from spark.rules.plan import PUSHDOWN_LIMIT

    count = PUSHDOWN_LIMIT + 6
    specs, errors = compile_specs(
        [
            RuleSpec(
                i,
                f"t{i % 7}",
                f"r{i}",
                f'SELECT payload.n AS n FROM "s/{i}/#" WHERE payload.t > 20',
            )
            for i in range(count)
        ]
    )
    assert not errors
    now = int(time.time() * 1000)
    _ReusedPlan._plans.clear()
    for b in range(3):
        rows = [
            message(f"t{i % 7}", f"s/{i}/x", {"n": b * 100 + i, "t": 10 + (i % 3) * 10}, now + i)
            for i in range(0, count, 3)
        ]
        rows.append(
            message("t1", "s/1/x", {"n": -1, "t": 99}, now)
        )  # another tenant's rule's topic
        frame = spark.createDataFrame(feed_rows(rows, first=1000 * b)).coalesce(1)
        reused = collect_outputs(frame, specs, reuse=True)
        built = rule_outputs(frame, specs).collect()
        assert answers(reused) == answers(built)
        assert any(r.status == "passed" for r in reused) and any(
            r.status != "passed" for r in reused
        )
    plans = list(_ReusedPlan._plans.values())
    assert not _ReusedPlan.disabled and [k[0] for k in _ReusedPlan._plans] == ["first"]
    assert all(isinstance(p, _ReusedPlan) for p in plans)


def test_arrow_results_are_the_rows_with_the_plain_skipped_ones_counted(spark):
    """The live job fetches a batch's results as Arrow (`spark.rules.results`): the rows that
    passed, failed or went over a budget come as `Row` would give them (naive local
    timestamps included), the plain skipped ones as counts and units per rule and publisher."""
    from collections import Counter

    from spark.rules.results import BatchResults

    specs, _ = compile_specs(
        [RuleSpec(1, "acme", "hot", SQL), RuleSpec(3, "acme", "raw", 'SELECT * FROM "loop/#"')]
    )
    now = int(time.time() * 1000)
    rows = [
        message("acme", "sensors/1/temp", {"n": i, "t": 15 + 3 * i}, now + i, client_id="d1")
        for i in range(8)
    ]
    rows.append(message("acme", "loop/x", {"n": 1}, now, client_id="d2"))
    rows.append(message("acme", "sensors/2/temp", b"not json", now, client_id="d2"))
    frame = spark.createDataFrame(feed_rows(rows, first=0))
    as_rows = collect_outputs(frame, specs, reuse=True)
    results = BatchResults.of(collect_outputs(frame, specs, reuse=True, arrow=True))
    fields = ("rule_id", "tenant", "ts", "units", "status", "outputs", "error", "budget")
    fields += ("message_id", "topic", "client_id", "username")
    expected = [r for r in as_rows if r.status != "skipped" or r.error or r.budget]
    assert sorted(tuple(getattr(r, f) for f in fields) for r in results.rows) == sorted(
        tuple(getattr(r, f) for f in fields) for r in expected
    )
    plain = [r for r in as_rows if r not in expected]
    assert plain and len(results) == len(as_rows)
    counted = Counter()
    for r in plain:
        counted[r.rule_id, r.username] += r.units
    assert {(s.rule_id, s.username): s.units for s in results.skipped} == dict(counted)
    assert sum(s.count for s in results.skipped) == len(plain)


def test_the_position_passes_a_batch_only_once_each_of_its_actions_settled():
    progress = FeedProgress()
    progress.open(1, "100-0")
    progress.add(1, 2)
    progress.close(1)
    progress.open(2, "200-0")
    progress.add(2, 1)
    progress.close(2)
    progress.open(3, "300-0")  # being evaluated: not closed yet
    assert progress.acted() is None
    progress.settle(2)  # the later batch's action first (another tenant's lane was faster)
    assert progress.acted() is None
    progress.settle(1)
    assert progress.acted() is None  # one of batch 1's actions still in memory
    progress.settle(1)
    assert progress.acted() == "200-0"
    progress.close(3)  # no action at all
    assert progress.acted() == "300-0"
    assert progress.waiting() == 0


def test_stream_ids_order_and_name_times():
    assert stream_id("1700000000000-5") > stream_id("1700000000000-4") > stream_id("169-99")
    assert stream_id(id_at(1700000000000)) < stream_id("1700000000000-0")
    assert stream_id(id_at(1700000000000)) > stream_id("1699999999998-1000")

"""The live rules job's journey rows (spark/rules/journey.py), without Spark: what they say, that
they read beside files written before the `rule` column, and that a store away loses nothing."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.journey.files import encode_segment
from common.journey.schema import MESSAGE_SCHEMA, MESSAGES, live_segment_key
from common.stores.object_store import LocalObjectStore
from spark.rules.actions import Job, Outcome
from spark.rules.journey import RuleJourney, action_words
from tenants.journey.selectors import JourneyReader
from tenants.journey.words import describe_outcome


def result(tenant: str, status: str, error: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(  # a RESULT_SCHEMA row: published a second before it was evaluated
        rule_id=7,
        tenant=tenant,
        status=status,
        error=error,
        topic="t/1",
        client_id="dev",
        ts=datetime.now(UTC) - timedelta(seconds=1),
    )


def window() -> dict:
    now = datetime.now(UTC)
    return {"start": now - timedelta(hours=1), "end": now + timedelta(minutes=1)}


@pytest.mark.parametrize(
    "action, words",
    [
        (
            {"type": "webhook", "url": "https://hooks.example.com/p?token=s3cret"},
            "webhook to hooks.example.com",
        ),
        ({"type": "republish", "topic": "out/${clientid}"}, "republish to out/${clientid}"),
        ({"type": "dataset", "name": "temps"}, "dataset temps"),
    ],
)
def test_an_action_in_words_names_it_without_its_secrets(action, words):
    assert action_words(action) == words


def test_rows_of_each_tenant_read_beside_older_files_without_the_rule_column(tmp_path):
    store = LocalObjectStore(tmp_path)
    now_ms = int(time.time() * 1000)
    old = pa.Table.from_pylist(
        [
            {
                "tenant": "acme",
                "ts": now_ms - 1000,
                "topic": "t/1",
                "outcome": "delivered",
                "sessions": 1,
                "client_id": "dev",
            }
        ],
        schema=MESSAGE_SCHEMA,
    ).drop_columns(["rule"])
    store.put(live_segment_key(MESSAGES, now_ms, "old-broker", 1), encode_segment(old))
    reader = JourneyReader(store)
    [only] = [describe_outcome(r) for r in reader.messages("acme", **window()).rows]
    assert (only["outcome"], only["rule"]) == ("delivered", None)  # no file has the column yet

    journey = RuleJourney(store, writer_id="rules-test")
    journey.results(
        [result("acme", "passed"), result("acme", "skipped"), result("evil", "failed", "boom")],
        {7: "fwd"},
    )
    job = Job(
        7,
        "acme",
        "$rules-7-",
        {"type": "webhook", "url": "http://h/x"},
        {},
        now_ms,
        topic="t/1",
        client_id="dev",
    )
    journey.actions([Outcome(job, False, "HTTP 500", dead=True, done_ms=now_ms)], {7: "fwd"})
    # An action that finishes after its rule was disabled (no longer loaded) still names it.
    late = Job(
        9,
        "acme",
        "$rules-9-",
        {"type": "republish", "topic": "o"},
        {},
        now_ms,
        topic="t/1",
        client_id="dev",
        rule_name="was-on",
    )
    journey.actions([Outcome(late, True, done_ms=now_ms)], {7: "fwd"})
    journey.flush(force=True)

    rows = [describe_outcome(r) for r in reader.messages("acme", **window()).rows]
    assert sorted((r["outcome"], r["rule"]) for r in rows) == [
        ("delivered", None),
        ("rule_action_failed", "fwd"),
        ("rule_action_ok", "was-on"),
        ("rule_matched", "fwd"),
    ]
    failed = next(r for r in rows if r["outcome"] == "rule_action_failed")
    assert failed["reason"] == (
        "rule fwd: action failed: webhook to h: HTTP 500 (kept as a dead letter: replay it "
        "from the rule's page)"
    )
    [theirs] = reader.messages("evil", **window()).rows
    assert (theirs["outcome"], theirs["reason"]) == ("rule_failed", "boom")


class Away(LocalObjectStore):
    up = False

    def put(self, key, body):
        if not self.up:
            raise OSError("store away")
        super().put(key, body)


def test_rows_wait_while_the_store_is_away_and_are_written_once_it_is_back(tmp_path):
    store = Away(tmp_path)
    journey = RuleJourney(store, writer_id="rules-test")
    journey.results([result("acme", "passed")], {7: "fwd"})
    journey.flush(force=True)
    assert journey.written == 0
    store.up = True
    journey.results([result("acme", "passed")], {7: "fwd"})
    journey.flush(force=True)
    assert journey.written == 2 and journey.dropped == 0
    [segment] = [k for k in store.list("journey/") if k.endswith(".parquet")]
    assert pq.read_table(tmp_path / segment).num_rows == 2


def test_one_tenants_unwritable_row_costs_no_other_tenant_its_rule_rows(tmp_path):
    """Issue 44, point 3: the rule rows of every tenant share a segment. An error quoting a
    lone surrogate (UTF-8, so Arrow, cannot hold one) is written with it escaped, and a row
    Arrow still refuses (a topic that is not text) is left out alone: the other tenant's rows
    of the same segment are all written."""
    store = LocalObjectStore(tmp_path)
    journey = RuleJourney(store, writer_id="rules-test")
    journey.results(
        [
            result("acme", "passed"),
            result("evil", "failed", "cannot read \ud800"),
            result("acme", "failed", "boom"),
        ],
        {7: "fwd"},
    )
    odd = result("evil", "passed")
    odd.topic = object()  # no check would let one through: the last line of defence
    journey.results([odd, result("acme", "passed")], {7: "fwd"})
    journey.flush(force=True)
    reader = JourneyReader(store)
    rows = [describe_outcome(r) for r in reader.messages("acme", **window()).rows]
    assert sorted(r["outcome"] for r in rows) == ["rule_failed", "rule_matched", "rule_matched"]
    [theirs] = reader.messages("evil", **window()).rows
    assert (theirs["outcome"], theirs["reason"]) == ("rule_failed", "cannot read \\ud800")

"""What a bucket sink takes is metered as bytes (issue 47, point 4: "metered as actions, and
bytes where the sink is a bucket"): the live job's sink sender, delivering to a real S3 (moto)
on its worker threads, reports the JSON bytes each S3 object took to the rule's tenant; a sink
of another kind (here an HTTP batch receiver) reports none. Through the live job's own
`SinkBytes` and usage writer they become the tenant's `sink_bytes` in the usage log, the
`rules-live` row the billing job sums and the control plane rolls up."""

from __future__ import annotations

import io
import json
import time
import uuid
from typing import Any

import pyarrow.parquet as pq
import pytest

from common.stores.object_store import LocalObjectStore
from spark.rules import sink_sender
from spark.rules.actions import Job
from spark.rules.ledger import ActionKey
from spark.rules.metering import SinkBytes, UsageWriter
from spark.rules.outbox import SinkOutbox
from spark.rules.sink_sender import SinkSender
from tenants.models import Rule
from tenants.models import SinkOutbox as OutboxRow
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.spark.conftest import database_url
from tests.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)


def _jobs(rule: Rule, index: int, first: int, count: int) -> list[Job]:
    action = rule.actions[index]
    jobs = []
    for n in range(first, first + count):
        ts_ms = int(time.time() * 1000)
        jobs.append(
            Job(
                rule.id,
                rule.tenant.slug,
                f"$rules-{rule.id}-",
                action,
                {"n": n, "temp": 20.5 + n, "note": "é" * (n % 3)},
                ts_ms,
                key=ActionKey(rule.id, 1, f"m{index}-{n}", index, 0, ts_ms),
                topic="plant/dev-1/temp",
                client_id="dev-1",
                rule_name=rule.name,
                action_index=index,
            )  # fmt: skip
        )
    return jobs


def test_a_bucket_sinks_delivered_bytes_are_metered_to_its_tenant_and_no_other_sinks(
    s3_endpoint, boto, aws, receiver, tmp_path, monkeypatch
):
    monkeypatch.setattr(sink_sender, "S3_FLUSH_SECONDS", 0.2)
    s3, bucket = boto("s3"), f"sink-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    tenant = tenant_services.tenant_create(f"t{uuid.uuid4().hex[:6]}")
    other = tenant_services.tenant_create(f"t{uuid.uuid4().hex[:6]}")
    to_bucket = {"type": "s3", "bucket": bucket, "prefix": "out", "format": "jsonl", **aws}
    to_http = {"type": "http_batch", "url": receiver.url}
    rule = rule_services.rule_create(tenant=tenant, name="out", sql='SELECT * FROM "plant/#"',
                                     actions=[to_bucket, to_http])  # fmt: skip
    elsewhere = rule_services.rule_create(tenant=other, name="out", sql='SELECT * FROM "plant/#"',
                                          actions=[to_http])  # fmt: skip
    reported: list[tuple[str, int]] = []
    meter = SinkBytes()

    def metered(slug: str, delivered: int) -> None:
        reported.append((slug, delivered))
        meter.add(slug, delivered)

    dsn = database_url()
    outbox = SinkOutbox(dsn)
    sender = SinkSender(dsn, workers=2, poll=0.05, metered=metered)
    outbox.on_append = sender.wake
    sender.start()
    try:
        queued = _jobs(rule, 0, 0, 12) + _jobs(rule, 1, 0, 5) + _jobs(elsewhere, 0, 0, 4)
        assert all(o.ok for o in outbox.append(queued))
        until(lambda: not OutboxRow.objects.exists(), 30, "every output delivered")
    finally:
        sender.stop()
        outbox.close()

    # What S3 holds, line by line, is what was metered: the outputs' JSON bytes, once each.
    objects = s3.list_objects_v2(Bucket=bucket)["Contents"]
    lines = [
        line
        for item in objects
        for line in s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().splitlines()
        if line
    ]
    assert sorted(json.loads(line)["n"] for line in lines) == list(range(12))
    took = sum(len(line) for line in lines)
    assert len(receiver.calls) >= 2  # the HTTP batches went out too, and were not metered
    assert {slug for slug, _ in reported} == {tenant.slug}
    assert sum(delivered for _, delivered in reported) == took
    assert took > len(lines) * len('{"n":0}')  # bytes, not a count of outputs

    # The live job drains them into the usage it flushes: one `rules-live` row of the tenant.
    store = LocalObjectStore(tmp_path / "store")
    writer = UsageWriter(store, "rules-live")
    tally = writer.new_tally()
    meter.drain_into(tally)
    key = writer.flush(tally)
    assert key is not None and key.rsplit("/", 1)[1].startswith("rules-live")
    rows = pq.read_table(io.BytesIO(store.get(key))).to_pylist()
    assert [(r["tenant"], r["writer"], r["actions_executed"]) for r in rows] == [
        (tenant.slug, "rules-live", 0)
    ] * len(rows)
    assert sum(r["sink_bytes"] for r in rows) == took
    # Drained: the next flush has nothing of theirs.
    again = writer.new_tally()
    meter.drain_into(again)
    assert writer.flush(again) is None


def test_the_live_jobs_usage_rows_carry_sink_bytes_only_where_a_bucket_took_some(tmp_path):
    """A tally's rows: the actions and rule runs as before, `sink_bytes` null where no bucket
    sink took anything (a row as the job wrote it before), a row of its own for bytes alone."""
    store = LocalObjectStore(tmp_path)
    writer = UsageWriter(store, "rules-live")
    meter = SinkBytes()
    meter.add("acme", 1200)
    meter.add("acme", 34)
    meter.add("zed", 0)  # nothing taken: nothing metered
    tally = writer.new_tally()
    tally.add("acme", rules_triggered=2, actions_executed=1)
    tally.add("beta", actions_executed=3)
    meter.drain_into(tally)
    key = writer.flush(tally)
    assert key is not None
    got: dict[str, list[Any]] = {}
    for r in pq.read_table(io.BytesIO(store.get(key))).to_pylist():  # a minute may turn
        sums = got.setdefault(r["tenant"], [0, 0, None])
        sums[0] += r["rules_triggered"]
        sums[1] += r["actions_executed"]
        if r["sink_bytes"] is not None:
            sums[2] = (sums[2] or 0) + r["sink_bytes"]
    assert got == {"acme": [2, 1, 1234], "beta": [0, 3, None]}

"""Sinks live, as `make run` runs them (issue 47): a device's messages through the broker and
the live feed to `run_rules --live`, whose rule hands each output to an HTTP-batch sink and an S3
sink (moto) through their outboxes. The HTTP receiver is cut off mid-stream and the job killed
with -9 while it is away: once both are back, every output of the tenant is there, none of
another tenant's, and each sink's state says it is ok; what the bucket took is in the usage log
as the tenant's `sink_bytes` (issue 47, point 4), the HTTP sink's deliveries are not."""

from __future__ import annotations

import io
import json
import uuid

import pyarrow.parquet as pq
import pytest
from django.db import connection

from tenants.devices import services as device_services
from tenants.models import SinkOutbox, SinkState
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.sinks.conftest import Outage, Receiver
from tests.spark.test_end_to_end import platform, start_live  # noqa: F401  (a fixture)
from tests.waiting import until

pytestmark = pytest.mark.django_db(transaction=True)


def test_outputs_reach_their_sinks_across_a_far_end_outage_and_a_kill_9(
    platform,  # noqa: F811
    s3_endpoint,
    monkeypatch,
    tmp_path,
):
    import boto3

    port, store, _broker = platform
    monkeypatch.setenv("WEBHOOK_ALLOW", "127.0.0.1")  # the far ends are local (the operator's)
    receiver = Receiver()
    outage = Outage(receiver.port)
    bucket = f"acme-{uuid.uuid4().hex[:8]}"
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket=bucket)
    acme = tenant_services.tenant_create("acme")
    evil = tenant_services.tenant_create("evil")
    _, secret = device_services.device_create(tenant=acme, name="pump", client_id_policy="any")
    _, evil_secret = device_services.device_create(tenant=evil, name="pump", client_id_policy="any")
    rule = rule_services.rule_create(
        tenant=acme, name="out", sql='SELECT payload.n AS n, clientid FROM "plant/+/temp"',
        actions=[
            {"type": "http_batch", "url": f"http://127.0.0.1:{outage.port}/in"},
            {"type": "s3", "bucket": bucket, "prefix": "readings", "endpoint_url": s3_endpoint,
             "region": "us-east-1", "access_key_id": "k", "secret_access_key": "s"},
        ],
    )  # fmt: skip
    connection.close()
    job = start_live(port, store, tmp_path)
    pump = Paho(port, "acme/pump", secret, "pump")
    spy = Paho(port, "evil/pump", evil_secret, "pump")

    def posted() -> list[int]:
        return [o["n"] for call in list(receiver.calls) for o in json.loads(call["body"])]

    def in_bucket() -> list[int]:
        found = s3.list_objects_v2(Bucket=bucket, Prefix="readings/").get("Contents", [])
        numbers = []
        for item in found:
            body = s3.get_object(Bucket=bucket, Key=item["Key"])["Body"].read().decode()
            numbers += [json.loads(line)["n"] for line in body.splitlines() if line]
        return numbers

    try:
        for n in range(20):
            pump.publish("plant/pump/temp", json.dumps({"n": n}), 1)
            spy.publish("plant/pump/temp", json.dumps({"n": 1000 + n}), 1)  # no rule of evil's
        until(lambda: len(set(posted())) >= 20, 60, "the first 20 posted")

        outage.down()  # the receiver away; the rule goes on producing
        for n in range(20, 40):
            pump.publish("plant/pump/temp", json.dumps({"n": n}), 1)
        until(
            lambda: SinkOutbox.objects.filter(rule=rule, action_index=0).exists()
            and SinkState.objects.filter(rule=rule, action_index=0).exclude(last_error="").exists(),
            30, "outputs waiting in the HTTP sink's outbox, its state saying why",
        )  # fmt: skip
        job.kill()  # kill -9 while outputs wait for the sink
        job.wait(timeout=30)
        job = start_live(port, store, tmp_path)
        outage.up()
        until(lambda: set(posted()) >= set(range(40)), 60, "every output posted")
        until(lambda: set(in_bucket()) >= set(range(40)), 60, "every output in the bucket")
        until(lambda: not SinkOutbox.objects.filter(rule=rule).exists(), 30, "outboxes empty")
        # The bucket's bytes metered, the tenant's only, flushed with the job's usage (every
        # 0.5 s). Not exactly its `delivered_bytes`: what the killed job settled in its last
        # half second it never flushed (as with its actions' usage), so at most those.
        bucket_bytes = SinkState.objects.get(rule=rule, action_index=1).delivered_bytes
        until(lambda: metered(store).get("acme", 0) > 0, 30, "the bucket's bytes metered")
        sums = metered(store)
        assert set(sums) == {"acme"} and 0 < sums["acme"] <= bucket_bytes
    finally:
        job.kill()
        job.wait(timeout=30)
        outage.down()
        receiver.close()

    assert set(posted()) == set(range(40)) and set(in_bucket()) == set(range(40))  # no evil's
    states = {s.action_index: s for s in SinkState.objects.filter(rule=rule)}
    assert {i: s.state for i, s in states.items()} == {0: "ok", 1: "ok"}
    http = states[0]
    assert http.delivered >= 40 and http.last_error  # it said what went wrong meanwhile
    numbers = posted()
    duplicated = {n for n in numbers if numbers.count(n) > 1}  # outputs there more than once
    assert len(duplicated) <= http.resent


def metered(store) -> dict[str, int]:
    """`sink_bytes` per tenant in the usage log's rows (the live job's `rules-live` writer)."""
    sums: dict[str, int] = {}
    for key in store.list("usage/"):
        for r in pq.read_table(io.BytesIO(store.get(key))).to_pylist():
            if r.get("sink_bytes"):
                assert r["writer"] == "rules-live"
                sums[r["tenant"]] = sums.get(r["tenant"], 0) + r["sink_bytes"]
    return sums

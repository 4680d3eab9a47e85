"""The live job and the backfill on an `s3://` object store (moto's S3 server over HTTP): a broker
on Postgres archiving to S3, `manage.py run_rules --live` reading the live segments through the
object store (Spark's own file source cannot: no hadoop-aws in the wheel), a paho device, the
republished message seen by a paho subscriber, the webhook calls seen by a real HTTP receiver,
and the lifecycle rows (`$events/client_connected`, `…/session_subscribed`,
`…/client_disconnected`) firing their rules in the live job from real clients' connections."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from django.conf import settings
from django.db import connection

from common.archive.files import read_archive
from common.stores.object_store import S3ObjectStore
from tenants.devices import services as device_services
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.spark.conftest import database_url, signature_ok
from tests.spark.test_end_to_end import start_live
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)
KEY = "rules-s3-service-key"
SECRET = "whsec-s3-test-0001"


@pytest.fixture
def s3_platform(s3_endpoint, monkeypatch):
    """A broker archiving to a fresh moto bucket every 0.5 s."""
    bucket = f"live-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    monkeypatch.setenv("MQTT_SERVICE_KEY", KEY)
    monkeypatch.setenv("OBJECT_STORE_URL", f"s3://{bucket}/mqtt")
    process, port = start_pg_broker("--archive-interval", "0.5")
    yield port, S3ObjectStore(bucket, "mqtt", endpoint_url=s3_endpoint)
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=20)


def _archived_publishes(store, tenant: str) -> int:
    now = datetime.now(UTC)
    rows = read_archive(store, now - timedelta(hours=1), now + timedelta(minutes=5), tenant)
    return sum(1 for row in rows.to_pylist() if row["event"] == "message.publish")


def _by_path(calls: list[dict], path: str) -> list[dict]:
    return [json.loads(c["body"]) for c in calls if c["path"] == path]


def _wait_for(receiver, predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate(receiver.ok_calls()):
        assert time.monotonic() < deadline, (what, [c["path"] for c in receiver.ok_calls()])
        time.sleep(0.1)


def test_live_job_on_s3_runs_actions_and_lifecycle_rules(s3_platform, receiver, tmp_path):
    port, store = s3_platform
    acme = tenant_services.tenant_create("acme")
    evil = tenant_services.tenant_create("evil")
    _, secret = device_services.device_create(tenant=acme, name="dev", client_id_policy="any")
    _, evil_secret = device_services.device_create(tenant=evil, name="dev", client_id_policy="any")
    hook = receiver.url
    rule_services.rule_create(
        tenant=acme,
        name="hot",
        sql='SELECT payload.seq AS seq, clientid FROM "sensors/+/temp" WHERE payload.t > 20',
        actions=[
            {"type": "republish", "topic": "alerts/${clientid}", "qos": 1},
            {"type": "webhook", "url": hook + "/hot", "secret": SECRET},
        ],
    )
    for name, source in (
        ("hello", "$events/client_connected"),
        ("subs", "$events/session_subscribed"),
        ("bye", "$events/client_disconnected"),
    ):
        rule_services.rule_create(
            tenant=acme,
            name=name,
            sql=f'SELECT clientid, event, topic, reason FROM "{source}"',
            actions=[{"type": "webhook", "url": f"{hook}/{name}", "secret": SECRET}],
        )
    connection.close()
    job = start_live(port, store, tmp_path)
    try:
        watcher = Paho(port, "acme/dev", secret, "watcher")
        watcher.subscribe("alerts/#", 1)
        intruder = Paho(port, "evil/dev", evil_secret, "intruder")  # another tenant's client
        device = Paho(port, "acme/dev", secret, "dev-s3")
        for seq in range(5):
            device.publish("sensors/1/temp", json.dumps({"seq": seq, "t": 25}), 1)
            device.publish("sensors/1/temp", json.dumps({"seq": 100 + seq, "t": 5}), 1)
            time.sleep(0.2)
        alerts = watcher.expect(5, 60)
        assert sorted(json.loads(m.payload)["seq"] for m in alerts) == list(range(5))
        assert {m.topic for m in alerts} == {"alerts/dev-s3"}
        device.close()
        _wait_for(
            receiver,
            # Each rule's actions are their own: one rule's webhook (a retried `hello`) may
            # come after another's (`bye`), so each one awaited is waited for.
            lambda calls: (
                len(_by_path(calls, "/hook/hot")) >= 5
                and any(b["clientid"] == "dev-s3" for b in _by_path(calls, "/hook/bye"))
                and {"watcher", "dev-s3"} <= {b["clientid"] for b in _by_path(calls, "/hook/hello")}
            ),
            60,
            "webhook calls",
        )
        calls = receiver.ok_calls()
        assert all(signature_ok(c, SECRET) for c in calls)
        assert sorted(b["seq"] for b in _by_path(calls, "/hook/hot")) == list(range(5))
        hello = {b["clientid"] for b in _by_path(calls, "/hook/hello")}
        assert {"watcher", "dev-s3"} <= hello and "intruder" not in hello
        assert all(b["event"] == "client.connected" for b in _by_path(calls, "/hook/hello"))
        subs = [(b["clientid"], b["topic"]) for b in _by_path(calls, "/hook/subs")]
        assert subs == [("watcher", "alerts/#")]
        bye = [b for b in _by_path(calls, "/hook/bye") if b["clientid"] == "dev-s3"]
        assert len(bye) == 1 and bye[0]["event"] == "client.disconnected" and bye[0]["reason"]
        intruder.close()
    finally:
        job.send_signal(signal.SIGINT)
        assert job.wait(timeout=60) == 0, "".join(job.log[-40:])
    # nothing went through a local folder: the segments are in the bucket
    assert any(k.endswith(".parquet") for k in store.list("archive/live/"))


def test_run_rules_backfill_on_s3(s3_platform):
    """`manage.py run_rules --from --to` over what the broker archived to S3."""
    port, store = s3_platform
    acme = tenant_services.tenant_create("acme")
    _, secret = device_services.device_create(tenant=acme, name="dev", client_id_policy="any")
    rule_services.rule_create(
        tenant=acme,
        name="hot",
        sql='SELECT payload.t AS t FROM "sensors/#" WHERE payload.t > 20',
        actions=[],
    )
    connection.close()
    device = Paho(port, "acme/dev", secret, "dev-b")
    for t in (25, 5, 30, 21, 20):
        device.publish("sensors/x", json.dumps({"t": t}), 1)
    device.close()
    # All five in the archive before the run: on a loaded machine a segment may be uploaded
    # seconds after the first one (a fixed wait read 2 of the 5 on a clean clone).
    deadline = time.monotonic() + 30
    while _archived_publishes(store, "acme") < 5:
        assert time.monotonic() < deadline, f"{_archived_publishes(store, 'acme')} of 5 archived"
        time.sleep(0.2)
    now = datetime.now(UTC)
    env = dict(os.environ, DATABASE_URL=database_url())
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "run_rules",
            "--tenant",
            "acme",
            "--from",
            (now - timedelta(hours=1)).isoformat(),
            "--to",
            (now + timedelta(minutes=5)).isoformat(),
        ],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout[done.stdout.index("{") :])
    assert summary["matched"] == 5 and summary["passed"] == 3, summary

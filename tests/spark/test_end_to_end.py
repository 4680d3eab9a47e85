"""End to end on the real platform parts: a broker on Postgres writing the archive (v2 Parquet),
paho devices, the live job, a paho subscriber for the republished messages and a real HTTP
receiver for the webhook; and `manage.py run_rules` backfilling what that broker archived."""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db import connection

from common.runtime import embedded
from common.runtime.embedded import free_port
from common.stores.object_store import LocalObjectStore
from tenants.devices import services as device_services
from tenants.models import RuleMetrics
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.spark.conftest import database_url, signature_ok
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)
KEY = "rules-e2e-service-key"
SECRET = "whsec-end-to-end-test-0001"


@pytest.fixture
def platform(monkeypatch, tmp_path):
    """A broker archiving to a local object store every 0.5 s, sharing the service key, and
    writing the live feed to Redis (its own stream) for the live job, as `make run` does."""
    root = tmp_path / "objects"
    monkeypatch.setenv("MQTT_SERVICE_KEY", KEY)
    monkeypatch.setenv("OBJECT_STORE_URL", f"file://{root}")
    monkeypatch.setenv("RULES_FEED_URL", embedded.redis_url())
    monkeypatch.setenv("RULES_FEED_KEY", f"rules:test:{uuid.uuid4().hex}")
    process, port = start_pg_broker("--archive-interval", "0.5")
    yield port, LocalObjectStore(root), process
    if process.poll() is None:
        process.terminate()
        process.wait(timeout=20)


def devices():
    acme = tenant_services.tenant_create("acme")
    evil = tenant_services.tenant_create("evil")
    _, acme_secret = device_services.device_create(tenant=acme, name="dev", client_id_policy="any")
    _, evil_secret = device_services.device_create(tenant=evil, name="dev", client_id_policy="any")
    return acme, evil, acme_secret, evil_secret


@pytest.mark.serial  # asserts the publish -> action latency target: not beside other tests
def test_live_publish_to_republish_and_webhook(platform, receiver, tmp_path):
    port, store, _ = platform
    acme, evil, acme_secret, evil_secret = devices()
    sql = 'SELECT payload.seq AS seq, payload.t AS t, clientid FROM "sensors/+/temp" WHERE payload.t > 20'
    rule_services.rule_create(
        tenant=acme,
        name="hot",
        sql=sql,
        actions=[
            {"type": "republish", "topic": "alerts/${clientid}", "qos": 1},
            {"type": "webhook", "url": receiver.url, "secret": SECRET},
        ],
    )
    rule_services.rule_create(  # evil's twin rule: same name, same SQL, its own republish
        tenant=evil, name="hot", sql=sql, actions=[{"type": "republish", "topic": "alerts/x"}]
    )
    loop = rule_services.rule_create(  # republishes into its own FROM: must not feed itself
        tenant=acme,
        name="echo",
        sql='SELECT payload AS p FROM "loop/#"',
        actions=[{"type": "republish", "topic": "loop/echo"}],
    )
    connection.close()
    job = start_live(port, store, tmp_path)
    try:
        watcher = Paho(port, "acme/dev", acme_secret, "watcher")
        watcher.subscribe("alerts/#", 1)
        watcher.subscribe("loop/#", 1)
        intruder = Paho(port, "evil/dev", evil_secret, "intruder")
        intruder.subscribe("#", 1)
        device = Paho(port, "acme/dev", acme_secret, "dev-1")
        sent: dict[int, float] = {}
        count = 12
        for seq in range(count):
            sent[seq] = time.time()
            device.publish("sensors/1/temp", json.dumps({"seq": seq, "t": 25}), 1)
            device.publish("sensors/1/temp", json.dumps({"seq": 100 + seq, "t": 5}), 1)  # cold
            time.sleep(0.25)
        alerts = watcher.expect(count, 60)
        assert sorted(json.loads(m.payload)["seq"] for m in alerts) == list(range(count))
        assert all(m.topic == "alerts/dev-1" for m in alerts)
        calls = receiver.wait(count, 20)
        assert all(signature_ok(c, SECRET) for c in calls)
        latencies = sorted(c["at"] - sent[json.loads(c["body"])["seq"]] for c in calls)
        # Through the live feed (issue 43; 5 s before it): the benchmark's target is 0.25 s on a
        # quiet machine; here, beside the suite's other serial tests, with room for noise.
        assert statistics.median(latencies) <= 1.0, (latencies, "".join(job.log[-40:]))
        assert latencies[-1] <= 5.0, latencies
        print(f"publish→webhook p50 {statistics.median(latencies):.2f}s max {latencies[-1]:.2f}s")

        device.publish("loop/in", "ping", 1)
        echoed = watcher.expect(3, 20)  # loop/in itself, then one echo, and nothing after
        topics = sorted(m.topic for m in echoed)
        assert topics == ["loop/echo", "loop/in"], topics
        time.sleep(3)
        assert watcher.nothing(1.0)
        assert intruder.nothing(0.5)  # neither tenant's alerts nor acme's traffic reach evil

        figures = scrape(job.metrics_port)
        assert figures['rules_passed_total{rule="hot",tenant="acme"}'] == count
        assert figures['rules_matched_total{rule="hot",tenant="acme"}'] == 2 * count
        assert figures['rules_actions_ok_total{rule="hot",tenant="acme"}'] == 2 * count
        assert not any('tenant="evil"' in name for name in figures)  # evil's rule saw nothing

        # A rule saved while messages flow: the next batch takes it (its plan compiled beside
        # the batches too), and the other rule's actions go on (issue 43: the first match after
        # saving within 2 s on a quiet machine; here with room for the suite's noise: the batch
        # that first meets the new rule still compiles part of it, 1-5 s measured loaded).
        flowing = threading.Event()
        flowing.set()

        def keep_publishing() -> None:
            seq = 1000
            while flowing.is_set():
                sent[seq] = time.time()
                device.publish("sensors/1/temp", json.dumps({"seq": seq, "t": 25}), 1)
                device.publish("doors/1", json.dumps({"seq": seq, "open": True}), 1)
                seq += 1
                time.sleep(0.1)

        publisher = threading.Thread(target=keep_publishing, daemon=True)
        publisher.start()
        try:
            time.sleep(1.0)
            saved = time.time()
            rule_services.rule_create(
                tenant=acme,
                name="door",
                sql='SELECT payload.seq AS seq FROM "doors/#" WHERE payload.open',
                actions=[{"type": "webhook", "url": receiver.url + "/door", "secret": SECRET}],
            )
            connection.close()
            deadline = time.monotonic() + 20
            while not any(c["path"] == "/hook/door" for c in receiver.calls):
                assert time.monotonic() < deadline, "the new rule never matched"
                time.sleep(0.05)
            time.sleep(1.0)
        finally:
            flowing.clear()
            publisher.join(5)
        first_door = min(c["at"] for c in receiver.calls if c["path"] == "/hook/door")
        assert first_door - saved <= 6.0, (first_door - saved, "".join(job.log[-40:]))
        during = [
            c["at"] - sent[json.loads(c["body"])["seq"]]
            for c in receiver.calls
            if c["path"] == "/hook" and json.loads(c["body"])["seq"] >= 1000
        ]
        assert during and max(during) <= 10.0, during  # the hot rule's actions went on
        print(
            f"first match {first_door - saved:.2f}s after saving; meanwhile max {max(during):.2f}s"
        )
    finally:
        job.send_signal(signal.SIGINT)  # Ctrl-C
        assert job.wait(timeout=60) == 0, "".join(job.log[-40:])
    assert RuleMetrics.objects.get(rule=loop).matched == 1


def test_killing_the_live_job_and_restarting_the_broker_loses_no_matched_action(
    platform, receiver, tmp_path
):
    """Issue 43: the live feed carries every acknowledged message a rule reads across a kill -9
    of the live job (its positions and the ledger in Postgres) and a restart of the broker (its
    feed sent before it exits): each matched message's action fires, none is lost."""
    port, store, broker = platform
    acme, _, acme_secret, _ = devices()
    rule_services.rule_create(
        tenant=acme,
        name="count",
        sql='SELECT payload.seq AS seq FROM "count/#"',
        actions=[{"type": "webhook", "url": receiver.url, "secret": SECRET}],
    )
    connection.close()
    job = start_live(port, store, tmp_path)
    device = Paho(port, "acme/dev", acme_secret, "dev-1")
    seq = 0

    def publish(count: int) -> None:
        nonlocal seq
        for _ in range(count):
            device.publish("count/1", json.dumps({"seq": seq}), 1)  # waits for its PUBACK
            seq += 1
            time.sleep(0.02)

    try:
        publish(40)
        job.kill()  # kill -9, mid-stream: actions queued, running, or not yet recorded
        job.wait(timeout=30)
        publish(40)  # while the job is down: the feed keeps them
        job = start_live(port, store, tmp_path)
        publish(40)
        device.close()
        broker.terminate()  # the broker restarts (what its feed held goes out first)
        assert broker.wait(timeout=30) == 0
        broker, port = start_pg_broker("--archive-interval", "0.5")
        device = Paho(port, "acme/dev", acme_secret, "dev-1")
        publish(40)
        deadline = time.monotonic() + 90
        while True:  # every one (a repeat does not stand for another)
            fired = [json.loads(c["body"])["seq"] for c in receiver.ok_calls()]
            if set(fired) >= set(range(seq)) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        time.sleep(1.0)  # and nothing more on its way
        fired = [json.loads(c["body"])["seq"] for c in receiver.ok_calls()]
        assert set(fired) == set(range(seq)), sorted(set(range(seq)) - set(fired))
        # At least once: a repeat only for what the killed job did but had not written down.
        repeats = len(fired) - seq
        assert repeats <= 25, repeats  # the ledger is written every 0.5 s: ~25 messages
        print(f"fired {len(fired)} for {seq} messages ({repeats} repeated after the kill)")
    finally:
        job.send_signal(signal.SIGINT)
        job.wait(timeout=60)
        broker.terminate()
        broker.wait(timeout=30)


def start_live(port: int, store: LocalObjectStore, tmp_path) -> subprocess.Popen:
    """`manage.py run_rules --live` as `make run` starts it; returns once it serves."""
    metrics_port = free_port()
    env = dict(
        os.environ,
        DATABASE_URL=database_url(),
        MQTT_INTERNAL_HOST="127.0.0.1",
        MQTT_INTERNAL_PORT=str(port),
    )
    process = subprocess.Popen(
        [
            sys.executable,
            "manage.py",
            "run_rules",
            "--live",
            "-v",
            "2",
            "--metrics-port",
            str(metrics_port),
            "--checkpoint",
            str(tmp_path / "checkpoint"),
        ],
        cwd=settings.BASE_DIR,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    process.metrics_port = metrics_port
    deadline = time.monotonic() + 120
    for line in process.stderr:
        if "live rules job running" in line:
            break
        assert time.monotonic() < deadline, "live job did not start"
    else:
        raise AssertionError(f"live job exited {process.wait()}")
    process.log = []  # keep draining stderr: a full pipe would block the job
    threading.Thread(target=lambda: process.log.extend(process.stderr), daemon=True).start()
    return process


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    figures = {}
    for line in text.splitlines():
        if line.startswith("rules_"):
            name, value = line.rsplit(" ", 1)
            figures[name] = float(value)
    return figures


def test_run_rules_backfills_what_the_broker_archived(platform):
    port, store, process = platform
    acme, evil, acme_secret, evil_secret = devices()
    sql = 'SELECT payload.t AS t FROM "sensors/#" WHERE payload.t > 20'
    rule = rule_services.rule_create(
        tenant=acme, name="hot", sql=sql, actions=[{"type": "dataset", "name": "hot"}]
    )
    rule_services.rule_create(tenant=evil, name="hot", sql=sql)
    connection.close()
    start = datetime.now(UTC) - timedelta(minutes=1)
    device = Paho(port, "acme/dev", acme_secret, "dev-1")
    other = Paho(port, "evil/dev", evil_secret, "dev-1")
    for t in (10, 21, 30, 40):
        device.publish("sensors/a", json.dumps({"t": t}), 1)
        other.publish("sensors/a", json.dumps({"t": t + 1000}), 1)
    device.publish("sensors/bad", "not json", 1)
    device.close()
    other.close()
    process.terminate()  # a graceful stop uploads the open segment
    assert process.wait(timeout=20) == 0
    end = datetime.now(UTC) + timedelta(minutes=1)
    env = dict(os.environ, DATABASE_URL=database_url())
    done = subprocess.run(
        [
            sys.executable,
            "manage.py",
            "run_rules",
            "--tenant",
            "acme",
            "--from",
            start.isoformat(),
            "--to",
            end.isoformat(),
        ],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert "chunks" in done.stderr  # the progress bar
    assert summary["rows_read"] >= 5  # acme's publishes (plus its connect/disconnect events)
    assert summary["matched"] == 5 and summary["passed"] == 3
    assert summary["actions_ok"] == 3
    import duckdb

    values = duckdb.sql(
        f"SELECT t FROM read_parquet('{store.root}/datasets/tenant=acme/hot/**/*.parquet') ORDER BY t"
    ).fetchall()
    assert values == [(21,), (30,), (40,)]
    assert not list(store.root.glob("datasets/tenant=evil*"))
    m = RuleMetrics.objects.get(rule=rule)
    assert (m.matched, m.passed, m.actions_ok) == (5, 3, 3)

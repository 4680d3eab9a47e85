"""The rule jobs against the real database, a real broker and a real HTTP receiver: backfill
summaries, counters, dead letters, datasets and metering; the live job end to end."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import duckdb
import pyarrow.parquet as pq
import pytest
from django.db import connection

from common.archive.schema import USAGE_SCHEMA
from common.runtime.embedded import free_port
from spark.rules.actions import ActionRunner, Job
from spark.rules.backfill import run_backfill
from spark.rules.live import LiveJob, wait_for_batches
from tenants.devices import services as device_services
from tenants.journey.selectors import JourneyReader
from tenants.journey.words import describe_outcome
from tenants.models import RuleDeadLetter, RuleMetrics
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.spark.conftest import Receiver, database_url, message, signature_ok, write_live
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)
KEY = "rules-test-service-key"
SECRET = "whsec-jobs-test-secret-0001"


@pytest.fixture
def broker(monkeypatch):
    monkeypatch.setenv("MQTT_SERVICE_KEY", KEY)
    process, port = start_pg_broker()
    yield port
    process.terminate()
    process.wait(timeout=10)


def metrics_of(rule) -> RuleMetrics:
    return RuleMetrics.objects.get(rule=rule)


def test_backfill_runs_actions_counts_and_meters(spark, store, broker, receiver):
    acme = tenant_services.tenant_create("acme")
    evil = tenant_services.tenant_create("evil")
    _, secret = device_services.device_create(tenant=acme, name="watcher", client_id_policy="any")
    _, evil_secret = device_services.device_create(
        tenant=evil, name="watcher", client_id_policy="any"
    )
    hot = rule_services.rule_create(
        tenant=acme,
        name="hot",
        sql='SELECT payload.temp AS temp, clientid FROM "sensors/#" WHERE payload.temp > 25',
        actions=[
            {"type": "republish", "topic": "alerts/${clientid}", "qos": 1},
            {"type": "webhook", "url": receiver.url, "secret": SECRET},
            {"type": "dataset", "name": "hot"},
        ],
    )
    same = rule_services.rule_create(  # the other tenant's rule of the same name and SQL
        tenant=evil,
        name="hot",
        sql='SELECT payload.temp AS temp, clientid FROM "sensors/#" WHERE payload.temp > 25',
    )
    connection.close()
    acme_watch = Paho(broker, "acme/watcher", secret, "w1")
    acme_watch.subscribe("alerts/#", 1)
    evil_watch = Paho(broker, "evil/watcher", evil_secret, "w2")
    evil_watch.subscribe("alerts/#", 1)

    now = int(time.time() * 1000) - 60_000
    write_live(
        store,
        [
            message("acme", "sensors/1", {"temp": 20}, now, client_id="dev-1"),
            message("acme", "sensors/2", {"temp": 30}, now + 1, client_id="dev-2"),
            message("evil", "sensors/2", {"temp": 99}, now + 2, client_id="dev-2"),
            message("acme", "sensors/3", b"not json", now + 3, client_id="dev-3"),
            message("acme", "sensors/4", {"temp": 40}, now + 4, client_id="dev-4"),
        ],
    )
    runner = ActionRunner(store, mqtt_port=broker, service_key=KEY.encode(), backoff=0.05)
    try:
        summary = run_backfill(
            spark, database_url(), store, now - 1000, now + 1000, tenant="acme", runner=runner
        )
    finally:
        runner.close()
    assert summary["rows_read"] == 4  # acme's rows only
    assert summary["matched"] == 4 and summary["passed"] == 2
    assert summary["actions_ok"] == 6 and summary["actions_failed"] == 0

    alerts = sorted((m.topic, json.loads(m.payload)["temp"]) for m in acme_watch.expect(2, 10))
    assert alerts == [("alerts/dev-2", 30), ("alerts/dev-4", 40)]
    assert evil_watch.nothing(0.5)  # never into another tenant's namespace

    calls = receiver.wait(2, 5)
    assert sorted(json.loads(c["body"])["temp"] for c in calls) == [30, 40]
    assert all(signature_ok(c, SECRET) for c in calls)

    files = [k for k in store.list("datasets/") if k.endswith(".parquet")]
    assert files and all(k.startswith("datasets/tenant=acme/hot/date=") for k in files)
    table = duckdb.sql(
        f"SELECT temp, clientid FROM read_parquet('{store.root}/datasets/**/*.parquet') ORDER BY temp"
    ).fetchall()
    assert table == [(30, "dev-2"), (40, "dev-4")]

    m = metrics_of(hot)
    assert (m.matched, m.passed, m.actions_ok, m.actions_failed) == (4, 2, 6, 0)
    assert m.failed == summary["failed"]
    assert not RuleMetrics.objects.filter(rule=same).exists()  # evil's rule did not run

    usage = [pq.read_table(store.root / k) for k in store.list("usage/")]
    rows = [r for t in usage for r in t.to_pylist()]
    assert usage and all(t.schema.equals(USAGE_SCHEMA) for t in usage)
    assert {r["tenant"] for r in rows} == {"acme"} and {r["writer"] for r in rows} == {
        "rules-backfill"
    }
    assert sum(r["rules_triggered"] for r in rows) == 4
    assert sum(r["actions_executed"] for r in rows) == 6


def test_a_republish_with_no_broker_says_where_it_looked(store):
    """A backfill run in a shell that does not know the broker's port (`make run MQTT_PORT=…`
    elsewhere) dead-letters its republishes: its log names the address and what sets it; the
    tenant's dead letter names no address of the platform."""
    port = free_port()  # nothing listens there
    runner = ActionRunner(store, mqtt_port=port, service_key=KEY.encode(), backoff=0.01)
    try:
        job = Job(1, "acme", "$rules-1-", {"type": "republish", "topic": "alerts/x"}, {"t": 1}, 0)
        [outcome] = runner.run([job])
    finally:
        runner.close()
    assert not outcome.ok
    where = f"no broker at 127.0.0.1:{port} (MQTT_INTERNAL_HOST, MQTT_INTERNAL_PORT)"
    assert where in outcome.detail  # in the operator's log
    assert "127.0.0.1" not in outcome.error  # never in the tenant's dead letter (issue 29)


def test_a_failing_webhook_is_retried_then_dead_lettered(spark, store):
    failing = Receiver(statuses=[500, 503, 500])
    try:
        acme = tenant_services.tenant_create("acme")
        rule = rule_services.rule_create(
            tenant=acme,
            name="hook",
            sql='SELECT topic FROM "t/#"',
            actions=[{"type": "webhook", "url": failing.url, "secret": SECRET}],
        )
        connection.close()
        now = int(time.time() * 1000) - 60_000
        write_live(store, [message("acme", "t/1", {"a": 1}, now)])
        runner = ActionRunner(store, attempts=3, backoff=0.05)
        try:
            summary = run_backfill(
                spark, database_url(), store, now - 1000, now + 1000, runner=runner
            )
        finally:
            runner.close()
        assert len(failing.calls) == 3  # three attempts, then given up
        assert summary["actions_failed"] == 1 and summary["dead_letters"] == 1
        letter = RuleDeadLetter.objects.get(rule=rule)
        assert letter.attempts == 3 and "500" in letter.error
        assert letter.output == {"topic": "t/1"} and "secret" not in letter.action
        assert "500" in metrics_of(rule).last_error
    finally:
        failing.close()


def test_live_job_applies_rule_changes_without_restart(spark, store, broker, receiver, tmp_path):
    """…and leaves in each tenant's journey what its rules did with each message (matched, each
    action's result, a failure's error), never in another tenant's."""
    started = datetime.now(UTC)
    acme = tenant_services.tenant_create("acme")
    _, secret = device_services.device_create(tenant=acme, name="watcher", client_id_policy="any")
    rule = rule_services.rule_create(
        tenant=acme,
        name="fwd",
        sql='SELECT payload.n AS n, clientid FROM "in/#"',
        actions=[
            {"type": "republish", "topic": "out/${clientid}", "payload": "n=${n}"},
            {"type": "webhook", "url": receiver.url, "secret": SECRET},
        ],
    )
    refusing = Receiver(statuses=[400])
    other = tenant_services.tenant_create("other")
    rule_services.rule_create(
        tenant=other,
        name="hook",
        sql='SELECT payload.n AS n FROM "in/#"',
        actions=[{"type": "webhook", "url": refusing.url + "?token=s3cret", "secret": SECRET}],
    )
    connection.close()
    watch = Paho(broker, "acme/watcher", secret, "watch")
    watch.subscribe("out/#", 0)
    runner = ActionRunner(store, mqtt_port=broker, service_key=KEY.encode())
    # Published ten minutes before the job's first start: a backfill's to run, not the live job's.
    stale = int(time.time() * 1000) - 600_000
    write_live(store, [message("acme", "in/a", {"n": 0}, stale, client_id="stale")])
    job = LiveJob(spark, database_url(), store, checkpoint=tmp_path / "ckpt", runner=runner)
    job.start()
    try:
        now = int(time.time() * 1000)
        write_live(
            store,
            [
                message("acme", "in/a", {"n": 1}, now, client_id="dev-9"),
                message("other", "in/a", {"n": 1}, now, client_id="dev-9"),
            ],
        )
        got = watch.expect(1, 30)
        assert (got[0].topic, got[0].payload) == ("out/dev-9", b"n=1")
        assert json.loads(receiver.wait(1, 10)[0]["body"]) == {"n": 1, "clientid": "dev-9"}

        rule_services.rule_update(rule, enabled=False)
        connection.close()
        batches = job.batches
        write_live(store, [message("acme", "in/a", {"n": 2}, int(time.time() * 1000))])
        wait_for_batches(job, batches + 1, 30)
        assert watch.nothing(1.0)

        rule_services.rule_update(
            rule, enabled=True, sql='SELECT payload.n AS n, clientid FROM "in2/#"'
        )
        connection.close()
        write_live(
            store, [message("acme", "in2/b", {"n": 3}, int(time.time() * 1000), client_id="d")]
        )
        got = watch.expect(1, 30)
        assert (got[0].topic, got[0].payload) == ("out/d", b"n=3")
    finally:
        job.stop()
        refusing.close()
    m = metrics_of(rule)
    assert m.matched == 2 and m.actions_ok == 4 and m.lag_ms is not None

    reader, until = JourneyReader(store), datetime.now(UTC) + timedelta(minutes=1)
    rows = [
        describe_outcome(r)
        for r in reader.messages("acme", start=started, end=until, client="dev-9").rows
    ]
    said = sorted((r["outcome"], r["topic"], r["rule"], r["reason"]) for r in rows)
    assert said == [
        ("rule_action_ok", "in/a", "fwd", "rule fwd: action done: republish to out/${clientid}"),
        ("rule_action_ok", "in/a", "fwd", "rule fwd: action done: webhook to 127.0.0.1"),
        ("rule_matched", "in/a", "fwd", "rule fwd: matched"),
    ], said
    theirs = reader.messages("other", start=started, end=until, outcome="rule_action_failed")
    [failed] = [describe_outcome(r) for r in theirs.rows]
    assert failed["rule"] == "hook" and failed["client_id"] == "dev-9"
    assert "webhook to 127.0.0.1: " in failed["reason"] and "400" in failed["reason"]
    assert "s3cret" not in failed["reason"] and "dead letter" in failed["reason"]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--from", "yesterday"], "ISO 8601"),
        (["--from", "2026-01-02T00:00:00Z", "--to", "2026-01-01T00:00:00Z"], "before --to"),
        (["--rule", "hot"], "--rule needs --tenant"),
        (["--live", "--tenant", "acme"], "--live serves every enabled rule"),
    ],
)
def test_run_rules_names_the_problem_with_its_arguments(args, message):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=message):
        call_command("run_rules", *args)


def test_run_rules_for_a_tenant_without_rules_says_so(spark, store, monkeypatch):
    from django.core.management import CommandError, call_command

    tenant_services.tenant_create("quiet")
    monkeypatch.setenv("OBJECT_STORE_URL", f"file://{store.root}")
    with pytest.raises(CommandError, match="no matching rules for tenant 'quiet'"):
        call_command("run_rules", "--tenant", "quiet", "--no-progress")

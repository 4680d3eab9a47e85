"""A live micro-batch whose evaluation fails is retried (bounded, with back-off) before it counts
as failed; a batch that still fails names its time window (log and /metrics) and a backfill over
that window runs its messages."""

from __future__ import annotations

import json
import logging
import time
from datetime import timedelta

import pytest
from django.db import connection

from spark.archive import spark_schema
from spark.rules import live
from spark.rules.actions import ActionRunner
from spark.rules.backfill import run_backfill
from spark.rules.live import LiveJob
from tenants.models import RuleMetrics
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.spark.conftest import database_url, message, write_live

pytestmark = pytest.mark.django_db(transaction=True)
SECRET = "whsec-retry-test-secret-01"


def job_and_batch(spark, store, receiver, tmp_path):
    acme = tenant_services.tenant_create("acme")
    rule = rule_services.rule_create(
        tenant=acme,
        name="hook",
        sql='SELECT payload.n AS n FROM "t/#"',
        actions=[{"type": "webhook", "url": receiver.url, "secret": SECRET}],
    )
    connection.close()
    now = int(time.time() * 1000)
    key = write_live(
        store,
        [message("acme", "t/1", {"n": 1}, now - 500), message("acme", "t/2", {"n": 2}, now)],
    )
    batch = spark.read.schema(spark_schema()).parquet(str(store.root / key))
    runner = ActionRunner(store, attempts=1, backoff=0.01)
    job = LiveJob(
        spark, database_url(), store, checkpoint=tmp_path / "c", runner=runner, backoff=0.05
    )
    return rule, job, batch, now


def test_a_failed_evaluation_is_retried_then_runs_once(
    spark, store, receiver, tmp_path, monkeypatch
):
    rule, job, batch, _ = job_and_batch(spark, store, receiver, tmp_path)
    real, calls = live.evaluate_batch, []

    def flaky(frame, specs, **options):
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("worker lost")
        return real(frame, specs, **options)

    monkeypatch.setattr(live, "evaluate_batch", flaky)
    try:
        job.handle_batch(batch, 7)
    finally:
        job.stop()
    assert len(calls) == 3 and job.batches == 1 and not job.failed_windows
    assert job.metrics.batch_retries._value.get() == 2
    assert job.metrics.batch_failures._value.get() == 0
    bodies = sorted(json.loads(c["body"])["n"] for c in receiver.wait(2, 10))
    assert bodies == [1, 2]
    assert RuleMetrics.objects.get(rule=rule).matched == 2  # counted once, not per attempt


def test_a_batch_that_keeps_failing_names_its_window_for_a_backfill(
    spark, store, receiver, tmp_path, monkeypatch, caplog
):
    rule, job, batch, now = job_and_batch(spark, store, receiver, tmp_path)
    attempts = []

    def broken(frame, specs, **options):
        attempts.append(1)
        raise ConnectionError("database away")

    monkeypatch.setattr(live, "evaluate_batch", broken)
    with caplog.at_level(logging.ERROR, logger="spark.rules.live"):
        job.handle_batch(batch, 8)
    job.stop()
    assert len(attempts) == job.attempts == 3 and job.batches == 0
    assert job.metrics.batch_failures._value.get() == 1
    ((start, end),) = job.failed_windows
    assert int(start.timestamp() * 1000) == now - 500
    assert end - start == timedelta(milliseconds=501)
    assert job.metrics.failed_from._value.get() == start.timestamp()
    assert f"run_rules --from {start.isoformat()} --to {end.isoformat()}" in caplog.text
    assert receiver.calls == []

    runner = ActionRunner(store, attempts=1, backoff=0.01)
    try:
        summary = run_backfill(
            spark,
            database_url(),
            store,
            int(start.timestamp() * 1000),
            int(end.timestamp() * 1000),
            runner=runner,
        )
    finally:
        runner.close()
    assert summary["actions_ok"] == 2 and len(receiver.wait(2, 10)) == 2
    assert RuleMetrics.objects.get(rule=rule).matched == 2

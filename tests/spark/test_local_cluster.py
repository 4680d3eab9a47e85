"""Distributed correctness (issue 42, point 4): billing, a backfill over a local archive and over
S3 (moto's server), and the live job's micro-batch of the live feed give on
`local-cluster[2,1,1024]` — two executor JVMs with Python workers of their own, as on a cluster —
exactly what they give in local mode: the same invoice bytes, rule outputs, webhook calls,
counters, metering and action-ledger rows, and nothing fired twice. And nothing an executor reads
lives only on the driver's disk: over S3 the backfill's chunks are read by the executors from the
bucket (`spark.object_source`), never from a copy the driver made (`spark.archive.readable_copy`
copies only for `local[…]`, whose executors are the driver's JVM), and so is billing's usage log.

One SparkContext per process: the local run is the suite's session (`spark`, `local[2]`), the
cluster's a child process (`tests/spark/cluster_checks.py`) that runs the same checks on one
`local-cluster` session and prints them as JSON. The database's rows each check wrote are taken
and deleted after it, so both runs start from the same state. The cluster's worker writes the
executors' logs under `$SPARK_HOME/work`: the child gets a SPARK_HOME of its own (links to the
pyspark wheel's entries), so nothing is written inside the virtualenv.

Not `serial`: the cluster's two executors have a core each, as `local[2]` has two threads.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from django.conf import settings
from django.db import connection

from common.archive.schema import live_segment_key
from spark.billing.job import Account, IssuedPeriod
from spark.entry.billing import accounts_json
from spark.session import in_process
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.billing.test_job import AWS_IRELAND, SMALL
from tests.billing.usage_rows import row, write_rows
from tests.spark.cluster_checks import MASTER, open_store, run_checks, spark_home
from tests.spark.conftest import database_url, message, parquet_bytes

SEPTEMBER = datetime(2026, 9, 1, tzinfo=UTC)
HOUR = 3_600_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _usage(stores) -> None:
    """A small usage log: two tenants over September (two writers), and late usage of August
    that one tenant was already billed for (an adjustment line)."""
    rows = []
    for day in range(0, 30, 3):
        for minute in (0, 61, 725):
            at = SEPTEMBER + timedelta(days=day, minutes=minute)
            rows.append(row("acme", at, messages=7 + day, connection_minutes=3, rules_triggered=2))
            rows.append(row("fleet", at, connection_minutes=1000 + minute, messages=325 * day))
    august = [row("acme", SEPTEMBER - timedelta(days=2, minutes=m), messages=40) for m in range(5)]
    for store in stores:
        write_rows(store, rows[::2] + august, writer="w1")
        write_rows(store, rows[1::2], writer="w2")


def _accounts() -> list[Account]:
    late = IssuedPeriod("2026-08", SMALL, {"messages": 150, "connection_minutes": 0})
    return [Account("acme", SMALL, issued=(late,)), Account("fleet", AWS_IRELAND)]


def _archive(stores, start_ms: int) -> int:
    """Three hours of live segments of two brokers (tenants acme and other, a payload that is not
    JSON); the webhook calls the rules below make of them."""
    calls = 0
    for hour in range(3):
        for writer in ("broker-a", "broker-b"):
            rows = []
            for n in range(6):
                ts = start_ms + hour * HOUR + n * 1000 + (500 if writer == "broker-b" else 0)
                rows.append(message("acme", f"t/{n}", {"n": n, "h": hour}, ts))
                rows.append(message("other", f"t/{n}", {"n": n}, ts))
                if n % 3 == 0:
                    rows.append(message("acme", "f/x", {"k": writer}, ts + 1))
                    calls += 3  # FOREACH [1..3]
            rows.append(message("acme", "t/bad", "not json", ts + 2))
            calls += sum(1 for n in range(6) if n > 2)  # hot: payload.n > 2
            key = live_segment_key(rows[0]["ts"], writer, hour + 1)
            for store in stores:
                store.put(key, parquet_bytes(rows))
    return calls


def _feed(start_ms: int) -> tuple[list[dict], int]:
    """A micro-batch of the live feed's rows (message ids as the feed gives them)."""
    rows, calls = [], 0
    for n in range(8):
        for tenant in ("acme", "other"):
            body = message(tenant, f"t/{n}", {"n": n}, start_ms + n)
            rows.append({**body, "payload": body["payload"].decode(), "message_id": f"feed:{n}"})
        calls += 1 if n > 2 else 0
    fan = message("acme", "f/y", {}, start_ms + 50)
    rows.append({**fan, "payload": fan["payload"].decode(), "message_id": "feed:fan"})
    return rows, calls + 3


@pytest.fixture
def job(s3_endpoint, tmp_path):
    port = _free_port()
    hook = f"http://127.0.0.1:{port}/hook"
    acme = tenant_services.tenant_create("acme")
    tenant_services.tenant_create("other")
    rule_services.rule_create(
        tenant=acme,
        name="hot",
        sql='SELECT payload.n AS n, clientid FROM "t/#" WHERE payload.n > 2',
        actions=[{"type": "webhook", "url": hook + "/hot"}],
    )
    rule_services.rule_create(
        tenant=acme,
        name="fan",
        sql='FOREACH [1..3] AS i DO i, topic FROM "f/#"',
        actions=[{"type": "webhook", "url": hook + "/fan"}],
    )
    rule_services.rule_create(tenant=acme, name="count", sql='SELECT * FROM "#"')
    connection.close()

    bucket = f"cluster-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    s3 = {"bucket": bucket, "endpoint": s3_endpoint}
    usage = {"local": {"root": str(tmp_path / "usage")}, "s3": {**s3, "prefix": "billing"}}
    archives = {"local": {"root": str(tmp_path / "archive")}, "s3": {**s3, "prefix": "mqtt"}}
    _usage([open_store(spec) for spec in usage.values()])
    hour = int(datetime.now(UTC).timestamp() * 1000) // HOUR * HOUR - 4 * HOUR
    webhooks = _archive([open_store(spec) for spec in archives.values()], hour)
    feed, live_webhooks = _feed(hour + 3 * HOUR + 10 * 60_000)
    return {
        "dsn": database_url(),
        "period": "2026-09",
        "accounts": json.loads(accounts_json(_accounts())),
        "usage": usage,
        "archives": archives,
        "from": hour,
        "to": hour + 3 * HOUR,
        "webhooks": webhooks,
        "receiver_port": port,
        "feed": feed,
        "live_webhooks": live_webhooks,
        "live_store": str(tmp_path / "live"),
    }


def _on_local_cluster(job: dict, folder: Path) -> dict:
    env = dict(os.environ, SPARK_HOME=str(spark_home(folder / "spark-home")))
    env.pop("PYSPARK_PYTHON", None)  # build_session sets this venv's interpreter
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark.cluster_checks"],
        input=json.dumps(job),
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=480,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.django_db(transaction=True)
@pytest.mark.timeout(600)  # 3-4 minutes on a shared 2-core machine: above the suite's 300 s
def test_local_cluster_gives_what_local_mode_gives(spark, job, tmp_path):
    local = run_checks(spark, job)
    cluster = _on_local_cluster(job, tmp_path)
    assert local["master"] == "local[2]" and cluster["master"] == MASTER
    assert cluster["executors"] == 2
    # its Python workers run this venv's interpreter (`build_session` gives it to local-cluster
    # too: the child's environment had no PYSPARK_PYTHON), in processes not the driver's
    driver_pid, python = cluster["driver"]
    assert {path for _, path in cluster["workers"]} == {python}
    assert driver_pid not in {pid for pid, _ in cluster["workers"]}

    # What local mode gives is itself right (so "the same" is not "the same mistake").
    for name in ("local", "s3"):
        invoices = [json.loads(d) for d in local["billing"][name]["documents"]]
        assert [i["tenant"] for i in invoices] == ["acme", "fleet"]
        assert all(i["total_cents"] > 0 for i in invoices)
        assert any(line["code"] == "adjustment" for line in invoices[0]["lines"])
        backfill = local["backfill"][name]
        summary = backfill["summary"]
        assert summary["rows_read"] == 3 * 2 * (6 + 2 + 1)  # acme's: the rules' tenant
        assert summary["actions_ok"] == job["webhooks"] == len(backfill["webhooks"])
        assert summary["failed"] >= 1 and summary["actions_failed"] == 0
        assert len(backfill["ledger"]) == job["webhooks"]
        assert {entry[6] for entry in backfill["ledger"]} == {"run"}
    live = local["live"]
    assert len(live["webhooks"]) == job["live_webhooks"] == len(live["ledger"])
    assert {entry[6] for entry in live["ledger"]} == {"live"}

    # local-cluster gives exactly the same, byte for byte
    assert cluster["billing"] == local["billing"]
    for name in ("local", "s3"):
        for part in ("summary", "webhooks", "ledger", "counters", "dead_letters"):
            assert cluster["backfill"][name][part] == local["backfill"][name][part], (name, part)
        assert cluster["backfill"][name]["usage"] == local["backfill"][name]["usage"]
    for part in ("webhooks", "ledger", "counters", "dead_letters", "usage"):
        assert cluster["live"][part] == local["live"][part], part
    # nothing fired twice: each (rule, message, output, action) once in the ledger
    for run in (*cluster["backfill"].values(), cluster["live"]):
        keys = [tuple(entry[:5]) for entry in run["ledger"]]
        assert len(keys) == len(set(keys)) == len(run["webhooks"])

    # Nothing an executor reads lives only on the driver's disk: over S3 the cluster's
    # executors read the bucket (an s3:// store handed to them, no local copy made), while
    # local mode reads a copy in TMPDIR (its executors are the driver's JVM).
    bucket = job["archives"]["s3"]["bucket"]
    assert cluster["backfill"]["s3"]["read_from"] == [f"s3://{bucket}/mqtt"]
    # (nor a scratch file for the live job's warm-up: its rows travel inside the plan)
    copied = ("archive-copy-", "usage-", "rules-warm-up-")
    assert not [c for c in cluster["copies"] if c.startswith(copied)]
    assert local["backfill"]["s3"]["read_from"][0].startswith("file://")
    assert {c.split("-")[0] for c in local["copies"] if c.startswith(copied)} == {
        "archive",
        "usage",
        "rules",
    }


def test_only_local_masters_run_executors_in_the_drivers_jvm():
    """What `readable_copy` and billing ask before reading a copy on the driver's disk."""
    assert in_process("local") and in_process("local[2]") and in_process("local[*, 3]")
    assert not in_process(MASTER) and not in_process("yarn") and not in_process("spark://h:7077")

"""A tenant's runs of a rule over its history, end to end on the real parts: the API on the real
database, the run on the suite's local Spark (the Celery task's body, `execute`, in a thread
as a worker would run it), a real HTTP receiver counting the webhook calls, the live job.

- a run's figures, outputs and metering (and another tenant with the same topics untouched);
- `none` counts and fires nothing; `all` fires every action;
- `new-only`: the live job fires some, a run the rest, the operator's `manage.py run_rules`
  (the same path) nothing more; every message reaches the receiver once, with the hour
  compacted between the live job and the runs (message ids survive);
- a cancel stops a running run between chunks, what it did stays done and metered;
- a run's worker killed (SIGKILL) between claiming its actions and confirming them: the stale-run
  cleanup gives its claims back, and the next `new-only` run fires each action it never fired
  once, those it had fired unconfirmed once more, and none confirmed before.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.core.management import call_command
from django.db import connection

from common.archive.files import compact_hour, hour_start
from common.archive.schema import message_id_prefix
from spark.rules.actions import ActionRunner
from spark.rules.live import LiveJob
from tenants.accounts import services as account_services
from tenants.models import RuleActionLedger, RuleRun
from tenants.rules import services as rule_services
from tenants.rules.runs import services as runs
from tests.api.conftest import client_for
from tests.spark.conftest import database_url, message, rule_usage, signature_ok, write_live

pytestmark = pytest.mark.django_db(transaction=True)
SECRET = "whsec-runs-test-secret-00000001"
KEY = "rules-runs-test-service-key"


@pytest.fixture
def worker(spark, store, monkeypatch):
    """Runs are dispatched to this in-process worker: `execute` on the suite's Spark session."""
    from tenants.rules.runs.execute import execute

    monkeypatch.setenv("MQTT_SERVICE_KEY", KEY)
    threads: list[threading.Thread] = []

    def work(run_id) -> None:
        try:
            execute(run_id, spark=spark, store=store)
        finally:
            connection.close()

    def dispatch(run) -> None:
        thread = threading.Thread(target=work, args=(run.id,), daemon=True)
        threads.append(thread)
        thread.start()

    monkeypatch.setattr(runs, "dispatch", dispatch)
    yield threads
    for thread in threads:
        thread.join(60)


def owner(tenant: str):
    created, _, token = account_services.signup(
        tenant=tenant, email=f"owner@{tenant}.io", password=f"pass-w0rd-{tenant}"
    )
    return created, client_for(token)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def start_run(api, name: str, start: datetime, end: datetime, actions: str) -> dict:
    body = {"from": iso(start), "to": iso(end), "mode": "run", "actions": actions}
    response = api.post(f"/api/v1/rules/{name}/runs", body, format="json")
    assert response.status_code == 202, response.content
    return response.json()


def wait_run(api, name: str, run_id: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        run = api.get(f"/api/v1/rules/{name}/runs/{run_id}").json()
        if run["state"] in ("done", "failed", "cancelled"):
            return run
        assert time.monotonic() < deadline, run
        time.sleep(0.2)


def test_a_run_fires_its_actions_counts_and_is_metered(spark, store, worker, receiver):
    acme, api = owner("acme")
    evil, _ = owner("evil")
    hook = {"type": "webhook", "url": receiver.url, "secret": SECRET}
    sql = 'SELECT payload.temp AS t, clientid FROM "sensors/+/temp" WHERE payload.temp > 30'
    rule_services.rule_create(tenant=acme, name="hot", sql=sql, actions=[hook])
    rule_services.rule_create(tenant=evil, name="hot", sql=sql, actions=[hook])
    now = datetime.now(UTC)
    base = int((now - timedelta(hours=3)).timestamp() * 1000)
    rows = []
    for i in range(40):  # the same topics for both tenants, in the same segments
        rows.append(message("acme", "sensors/k/temp", {"temp": i}, base + i, client_id="k1"))
        rows.append(message("evil", "sensors/k/temp", {"temp": 99}, base + i, client_id="e1"))
    rows.append(message("acme", "sensors/k/hum", {"temp": 99}, base + 99))
    write_live(store, rows)
    connection.close()

    # `none` first: the outputs counted, nothing fired, only the evaluation metered.
    counted = start_run(api, "hot", now - timedelta(hours=6), now, "none")
    counted = wait_run(api, "hot", counted["id"])
    assert (counted["matched"], counted["actions_fired"], counted["actions_skipped"]) == (9, 0, 9)
    assert receiver.calls == [] and rule_usage(store, "acme") == (40, 0)

    run = start_run(api, "hot", now - timedelta(hours=6), now, "all")
    assert run["state"] == "queued"
    done = wait_run(api, "hot", run["id"])
    assert done["state"] == "done", done
    figures = {k: done[k] for k in ("read", "considered", "matched", "failed", "progress")}
    assert figures == {"read": 41, "considered": 40, "matched": 9, "failed": 0, "progress": 1.0}
    assert (done["actions_fired"], done["actions_failed"], done["actions_skipped"]) == (9, 0, 0)
    calls = receiver.wait(9, 10)
    assert sorted(json.loads(c["body"])["t"] for c in calls) == list(range(31, 40))
    assert all(signature_ok(c, SECRET) for c in calls)
    assert {json.loads(c["body"])["clientid"] for c in calls} == {"k1"}
    # Metered like the live job: one unit per message the rule evaluated, one per action.
    assert rule_usage(store, "acme") == (80, 9)
    assert rule_usage(store, "evil") == (0, 0)
    assert RuleActionLedger.objects.filter(source="run").count() == 9


def test_new_only_fires_no_action_twice_across_the_live_job_and_runs(
    spark, store, worker, receiver, tmp_path, monkeypatch
):
    monkeypatch.setenv("MQTT_SERVICE_KEY", KEY)
    monkeypatch.setenv("OBJECT_STORE_URL", f"file://{store.root}")  # the command's store
    acme, api = owner("acme")
    hook = {"type": "webhook", "url": receiver.url, "secret": SECRET}
    rule = rule_services.rule_create(
        tenant=acme, name="fwd", sql='SELECT payload.n AS n FROM "in/#"', actions=[hook]
    )
    connection.close()
    started = datetime.now(UTC)
    # Three messages before the live job starts (a backfill's, not the live job's) ...
    old = int((started - timedelta(minutes=10)).timestamp() * 1000)
    write_live(store, [message("acme", "in/a", {"n": n}, old + n) for n in (1, 2, 3)], "b-old")
    runner = ActionRunner(store, service_key=KEY.encode(), attempts=1)
    job = LiveJob(
        spark,
        database_url(),
        store,
        checkpoint=tmp_path / "ckpt",
        runner=runner,
        trigger_seconds=0.5,
    )
    job.start()
    try:  # ... two while it serves: it fires them and records them in the ledger
        now = int(time.time() * 1000)
        write_live(store, [message("acme", "in/a", {"n": n}, now + n) for n in (4, 5)], "b-now")
        receiver.wait(2, 30)
        deadline = time.monotonic() + 10
        while RuleActionLedger.objects.filter(source="live").count() < 2:
            assert time.monotonic() < deadline, "the live job recorded nothing"
            time.sleep(0.2)
    finally:
        job.stop()
    # The hours compacted in between: the runs read history parts, not the live segments.
    for hour in {hour_start(started - timedelta(minutes=10)), hour_start(started)}:
        compact_hour(store, hour)
    assert not [k for k in store.list("archive/live/") if k.endswith(".parquet")]

    end = datetime.now(UTC)
    first = wait_run(
        api, "fwd", start_run(api, "fwd", started - timedelta(hours=1), end, "new-only")["id"]
    )
    assert (first["state"], first["matched"]) == ("done", 5)
    assert (first["actions_fired"], first["actions_skipped"]) == (3, 2)

    # The operator's command takes the same path: a run of the rule, the tenant sees it.
    call_command(
        "run_rules", "--tenant", "acme", "--rule", "fwd", "--from", iso(started - timedelta(hours=1)),
        "--to", iso(end), "--actions", "new-only", "--no-progress",
    )  # fmt: skip
    second = api.get("/api/v1/rules/fwd/runs").json()["results"][0]
    assert second["requested_by"] == "operator (manage.py run_rules)"
    assert (second["state"], second["actions_fired"], second["actions_skipped"]) == ("done", 0, 5)

    time.sleep(0.5)  # nothing late
    bodies = sorted(json.loads(c["body"])["n"] for c in receiver.ok_calls())
    assert bodies == [1, 2, 3, 4, 5]  # each message once: live, then runs
    assert RuleActionLedger.objects.filter(rule=rule, version=1).count() == 5


class HeldReceiver:
    """Answers each webhook call only once `release` is set (or after `hold` seconds)."""

    def __init__(self, hold: float = 20.0) -> None:
        self.calls = 0
        self.bodies: list[dict] = []  # every call's body, answered or not
        self.release = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.bodies.append(json.loads(body))
                receiver.calls += 1
                receiver.release.wait(hold)
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:  # its caller was killed meanwhile
                    pass

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def test_a_running_run_is_cancelled_between_chunks(spark, store, worker):
    held = HeldReceiver()
    try:
        acme, api = owner("acme")
        hook = {"type": "webhook", "url": held.url, "secret": SECRET}
        rule_services.rule_create(
            tenant=acme, name="all", sql='SELECT * FROM "t/#"', actions=[hook]
        )
        connection.close()
        now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
        # Eight hours of one segment each: chunks of four hours (two files per core).
        for hour in range(8, 0, -1):
            ts = int((now - timedelta(hours=hour)).timestamp() * 1000)
            write_live(store, [message("acme", "t/x", {"i": i}, ts + i) for i in range(5)])
        run = start_run(api, "all", now - timedelta(hours=9), now, "all")
        deadline = time.monotonic() + 60
        while held.calls < 1:  # the first chunk's actions are under way
            assert time.monotonic() < deadline, api.get(
                f"/api/v1/rules/all/runs/{run['id']}"
            ).json()
            time.sleep(0.05)
        asked = api.post(f"/api/v1/rules/all/runs/{run['id']}/cancel")
        assert asked.status_code == 202 and asked.json()["cancel_requested_at"]
        time.sleep(1.0)  # the watch sees it (every 0.5 s)
        held.release.set()
        ended = wait_run(api, "all", run["id"])
    finally:
        held.close()
    assert ended["state"] == "cancelled", ended
    assert ended["actions_fired"] == 20 and ended["read"] == 20 and ended["progress"] < 1
    assert held.calls == 20  # the second chunk never ran
    assert rule_usage(store, "acme") == (20, 20)
    assert RuleRun.objects.get(id=run["id"]).finished_at is not None


def test_a_killed_workers_unfired_actions_fire_once_in_the_next_new_only_run(spark, store, worker):
    held = HeldReceiver(hold=30)
    killed = None
    try:
        acme, api = owner("acme")
        hook = {"type": "webhook", "url": held.url, "secret": SECRET}
        rule = rule_services.rule_create(
            tenant=acme, name="fwd", sql='SELECT payload.n AS n FROM "in/#"', actions=[hook]
        )
        connection.close()
        now = datetime.now(UTC)
        base = int((now - timedelta(hours=2)).timestamp() * 1000)
        key = write_live(store, [message("acme", "in/a", {"n": n}, base + n) for n in range(22)])
        moment = lambda ms: datetime.fromtimestamp(ms / 1000, UTC)  # noqa: E731

        # Messages 0 and 1: a run fires them and confirms them.
        held.release.set()
        first = start_run(api, "fwd", moment(base), moment(base + 2), "new-only")
        assert wait_run(api, "fwd", first["id"])["actions_fired"] == 2
        held.release.clear()

        # The next run's worker claims the other 20 and fires 16 at once (its pool's size):
        # the receiver holds them unanswered; the other 4 wait in the pool, claimed, unfired.
        second = runs.run_start(
            rule=rule, start=moment(base), end=moment(base + 22), dispatch_now=False
        )
        prefix = message_id_prefix(key)
        rows = [[rule.id, base + n, json.dumps([{"n": n}]), f"{prefix}:{n}"] for n in range(2, 22)]
        job = {"dsn": database_url(), "run": str(second.id), "tenant": "acme", "rule": "fwd"}
        job.update(store=str(store.root), rows=rows)
        killed = subprocess.Popen(
            [sys.executable, "-m", "tests.spark.killed_run_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        killed.stdin.write(json.dumps(job))
        killed.stdin.close()
        assert killed.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while held.calls < 2 + 16:  # the first run's two, then the pool's 16
            assert time.monotonic() < deadline, held.calls
            time.sleep(0.05)
        time.sleep(0.3)  # no 17th call comes: the pool is full
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(10)
        fired_unconfirmed = {b["n"] for b in held.bodies[2:]}
        assert len(fired_unconfirmed) == 16
        claimed = RuleActionLedger.objects.filter(run_id=second.id, fired=False)
        assert claimed.count() == 20  # held by a run whose worker is gone

        # Two minutes without a heartbeat: the next start finds the run stale, fails it and
        # gives its unconfirmed claims back.
        RuleRun.objects.filter(pk=second.id).update(heartbeat_at=now - timedelta(minutes=3))
        claimed_ids = set(claimed.values_list("message_id", flat=True))
        held.release.set()
        third = start_run(api, "fwd", moment(base), moment(base + 22), "new-only")
        lost = api.get(f"/api/v1/rules/fwd/runs/{second.id}").json()
        assert lost["state"] == "failed" and "worker" in lost["error"]
        third = wait_run(api, "fwd", third["id"])
    finally:
        if killed is not None and killed.poll() is None:
            killed.kill()
        held.close()
    assert third["state"] == "done", third
    assert (third["actions_fired"], third["actions_skipped"]) == (20, 2)
    times = {n: [b["n"] for b in held.bodies].count(n) for n in range(22)}
    # Never zero: the 4 never fired fire once; the 16 fired but unconfirmed once more (at least
    # once); the 2 confirmed are not fired again.
    assert {n for n, c in times.items() if c == 1} == set(range(22)) - fired_unconfirmed
    assert {n for n, c in times.items() if c == 2} == fired_unconfirmed
    entries = RuleActionLedger.objects.filter(rule=rule, version=1)
    assert entries.count() == 22 and not entries.filter(fired=False).exists()
    # The third run took the very actions the killed one had claimed (the same message ids).
    assert claimed_ids <= set(entries.values_list("message_id", flat=True))

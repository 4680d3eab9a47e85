"""The hand-over a tenant's run over history crosses under `make run` and as deployed: the web
side sends the task through the project's Celery app to Redis, a real Celery worker process
(started from the table of processes, as `make run` starts it) takes it and runs it on its own
Spark; no in-process runner. And when the task queue cannot be reached, the run ends `failed`
in words instead of waiting `queued` for ever and holding its rule.

The other run tests (tests/api, tests/spark/test_rule_runs.py) replace `dispatch` with an
in-process runner to look closely at the figures; this module is the real boundary beside them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db import connection
from kombu.exceptions import OperationalError

from common.runtime import embedded
from tenants.accounts import services as account_services
from tenants.models import RuleRun
from tenants.rules import services as rule_services
from tenants.rules.runs import services as runs
from tests.api.conftest import client_for
from tests.celery_processes import worker_and_beat
from tests.spark.conftest import message, write_live

pytestmark = pytest.mark.django_db(transaction=True)
SQL = 'SELECT payload.temp AS t, clientid FROM "sensors/+/temp" WHERE payload.temp > 30'


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def owner(tenant: str):
    created, _, token = account_services.signup(
        tenant=tenant, email=f"owner@{tenant}.io", password=f"pass-w0rd-{tenant}"
    )
    return created, client_for(token)


def python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """`code` in a fresh interpreter of the checkout, as a process of the platform starts."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_web_entry_point_loads_the_projects_celery_app():
    """What the web process (Daphne on `control_plane.asgi`) sends a task with: the project's
    app on REDIS_URL, not Celery's default app on its default AMQP address."""
    env = dict(os.environ, REDIS_URL="redis://127.0.0.1:6390/0")
    env.pop("PLATFORM_ROLE", None)
    code = (
        "import control_plane.asgi\n"
        "from celery import current_app\n"
        "print(current_app.main, current_app.conf.broker_url)\n"
    )
    shown = python(code, env)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert shown.stdout.split()[-2:] == ["control_plane", "redis://127.0.0.1:6390/0"]


def test_a_run_over_history_is_taken_by_a_real_worker_and_ends_done(tmp_path, monkeypatch):
    acme, api = owner("acme")
    rule_services.rule_create(tenant=acme, name="hot", sql=SQL)
    objects = tmp_path / "objects"
    from common.stores.object_store import LocalObjectStore

    now = datetime.now(UTC)
    base = int((now - timedelta(hours=2)).timestamp() * 1000)
    rows = [message("acme", "sensors/k/temp", {"temp": i}, base + i) for i in range(40)]
    write_live(LocalObjectStore(objects), rows)
    monkeypatch.setenv("OBJECT_STORE_URL", f"file://{objects}")
    monkeypatch.setenv("SPARK_MASTER", "local[1]")
    connection.close()
    database = connection.settings_dict["NAME"]
    with worker_and_beat(tmp_path / "celery", database, roles=("worker",)):
        body = {"from": iso(now - timedelta(hours=6)), "to": iso(now), "mode": "run"}
        started = api.post("/api/v1/rules/hot/runs", body, format="json")
        assert started.status_code == 202, started.content
        run_id = started.json()["id"]
        deadline = time.monotonic() + 240  # the worker's first Spark job starts its JVM
        while True:
            run = api.get(f"/api/v1/rules/hot/runs/{run_id}").json()
            if run["state"] in ("done", "failed", "cancelled"):
                break
            assert time.monotonic() < deadline, run
            time.sleep(0.5)
    assert run["state"] == "done", run
    assert (run["read"], run["matched"]) == (40, 9), run  # temps 31..39


def test_a_run_the_task_queue_cannot_take_fails_in_words_and_frees_its_rule(monkeypatch):
    """The Celery broker does not answer (unit level: the send raises as kombu does when Redis
    refuses the connection)."""
    acme, api = owner("acme")
    rule_services.rule_create(tenant=acme, name="hot", sql=SQL)

    def unreachable(run) -> None:
        raise OperationalError("Error 111 connecting to 127.0.0.1:6390. Connection refused.")

    monkeypatch.setattr(runs, "dispatch", unreachable)
    now = datetime.now(UTC)
    body = {"from": iso(now - timedelta(hours=6)), "to": iso(now), "mode": "run"}
    answer = api.post("/api/v1/rules/hot/runs", body, format="json")
    assert answer.status_code == 202, answer.content
    run = answer.json()
    assert run["state"] == "failed", run
    assert "could not be handed to a worker" in run["error"] and "Try again" in run["error"]
    assert RuleRun.objects.get(id=run["id"]).state == "failed"
    # Nothing holds the rule: the next try is taken (and this time handed over).
    handed: list[RuleRun] = []
    monkeypatch.setattr(runs, "dispatch", handed.append)
    again = api.post("/api/v1/rules/hot/runs", body, format="json")
    assert again.status_code == 202 and again.json()["state"] == "queued", again.content
    assert [str(r.id) for r in handed] == [again.json()["id"]]


def test_a_409_names_the_run_that_holds_the_rule_and_how_to_cancel_it(monkeypatch):
    acme, api = owner("acme")
    rule_services.rule_create(tenant=acme, name="hot", sql=SQL)
    monkeypatch.setattr(runs, "dispatch", lambda run: None)  # it stays queued
    now = datetime.now(UTC)
    body = {"from": iso(now - timedelta(hours=6)), "to": iso(now), "mode": "run"}
    first = api.post("/api/v1/rules/hot/runs", body, format="json").json()
    refused = api.post("/api/v1/rules/hot/runs", body, format="json")
    assert refused.status_code == 409
    error = refused.json()["error"]
    assert first["id"] in error["message"] and "cancel" in error["message"]
    cancel = error["run"]["cancel"]
    assert error["run"]["id"] == first["id"] and error["run"]["state"] == "queued"
    assert api.post(cancel).json()["state"] == "cancelled"
    assert api.post("/api/v1/rules/hot/runs", body, format="json").status_code == 202


def test_importing_the_project_does_not_start_the_embedded_redis():
    """Every `manage.py` command imports the project, and with it the Celery app: Redis is
    looked up only when a task is sent."""
    code = (
        "import django, os\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'control_plane.settings')\n"
        "django.setup()\n"
        "import control_plane\n"
        "print(control_plane.celery_app.main)\n"
    )
    env = dict(os.environ, EMBEDDED_REDIS_DIR=str(embedded.DATA_DIR / "redis-never-started"))
    env.pop("REDIS_URL", None)
    shown = python(code, env)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert shown.stdout.split()[-1] == "control_plane"
    assert not (embedded.DATA_DIR / "redis-never-started" / "port").exists()

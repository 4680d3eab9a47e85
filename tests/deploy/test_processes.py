"""Every role of the table of processes, started the way the container starts it
(`docker/entrypoint.sh ROLE`) as a local process against the test Postgres and Redis, answers
its health check — the same `python -m common.runtime.processes --health` the image's HEALTHCHECK,
compose and the ECS task definitions run. Jobs (migrate, billing) finish with exit 0."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from common.runtime import embedded, processes

REPO = Path(__file__).resolve().parents[2]
ENTRYPOINT = REPO / "docker" / "entrypoint.sh"

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_table_declares_every_role_once():
    assert set(processes.ROLES) == {
        "web",
        "broker",
        "worker",
        "beat",
        "rules",
        "billing",
        "migrate",
    }
    env = {"WEB_PORT": "9000", "MQTT_PORT": "2883", "BIND_HOST": "0.0.0.0"}
    web = processes.command("web", env, python="py")
    assert (
        web[:3] == ["py", "-m", "control_plane.web_server"] and "9000" in web and "0.0.0.0" in web
    )
    broker = processes.command("broker", env, python="py")
    assert broker[2:3] == ["runbroker"] and "2883" in broker
    rules = processes.command("rules", {"RULES_CHECKPOINT": "/c"}, python="py")
    assert rules[2:4] == ["run_rules", "--live"] and rules[-2:] == ["--checkpoint", "/c"]
    assert "9101" in rules, "the live job serves /metrics: its health check"
    billing = processes.command("billing", {"BILLING_PERIOD": "2026-10"}, python="py")
    assert billing[2:] == ["billing_report", "--period", "2026-10"]
    assert processes.command("billing", {}, python="py")[-1] == processes.previous_month()
    with pytest.raises(ValueError, match="unknown role 'nope'"):
        processes.command("nope")


def test_celery_keeps_quiet_at_log_level_warning_and_above():
    # Issue 41: `make run` (LOG_LEVEL WARNING) showed Celery's banners and its root warning.
    for level in ("WARNING", "warning", "ERROR", "CRITICAL"):
        for role in ("worker", "beat"):
            argv = processes.command(role, {"LOG_LEVEL": level}, python="py")
            assert argv[:2] == ["py", "-W"] and processes.ROOT_WARNING in argv[2]
            assert argv[3:8] == ["-m", "celery", "-A", "control_plane", "-q"], argv
    for env in ({"LOG_LEVEL": "INFO"}, {"LOG_LEVEL": "DEBUG"}, {}):
        argv = processes.command("worker", env, python="py")
        assert argv[:6] == ["py", "-m", "celery", "-A", "control_plane", "worker"], argv


def test_previous_month_rolls_over_the_year():
    import datetime as dt

    assert processes.previous_month(dt.date(2027, 1, 15)) == "2026-12"
    assert processes.previous_month(dt.date(2026, 3, 1)) == "2026-02"


def test_the_entrypoint_refuses_an_unknown_role():
    result = subprocess.run(
        ["sh", str(ENTRYPOINT), "webserver"], capture_output=True, text=True, timeout=30
    )
    assert result.returncode != 0 and "ROLE must be one of" in result.stderr


# --- each role as a process -----------------------------------------------------------------


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    db = connection.settings_dict
    environment = dict(os.environ)
    # `python` in the entrypoint is this virtualenv's, as it is the image's in a container.
    environment["PATH"] = f"{Path(sys.executable).parent}:{environment['PATH']}"
    environment.update(
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        REDIS_URL=os.environ.get("REDIS_URL") or embedded.redis_url(),
        PLATFORM_STATE_DIR=str(tmp_path / "state"),
        BIND_HOST="127.0.0.1",
        WEB_PORT=str(embedded.free_port()),
        MQTT_PORT=str(embedded.free_port()),
        MQTT_WS_PORT=str(embedded.free_port()),
        WORKER_NODE_HOST=f"deploy-test-{uuid.uuid4().hex[:8]}",
        WORKER_CONCURRENCY="1",
        RULES_METRICS_PORT=str(embedded.free_port()),
        METRICS_PORT=str(embedded.free_port()),
        RULES_CHECKPOINT=str(tmp_path / "rules-checkpoint"),
        MQTT_SERVICE_KEY="deploy-test-service-key",
        LOG_LEVEL="INFO",
    )
    environment.pop("PLATFORM_ROLE", None)
    connection.close()  # the processes share the test database
    return environment


def health(env: dict[str, str], role: str | None = None) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "common.runtime.processes", "--health"] + ([role] if role else [])
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, cwd=REPO)


@contextmanager
def running(role: str, env: dict[str, str], log: Path, *extra: str) -> Iterator[subprocess.Popen]:
    with open(log, "w") as out:
        process = subprocess.Popen(
            ["sh", str(ENTRYPOINT), role, *extra],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def wait_healthy(process, env, role, log: Path, within: float) -> str:
    deadline = time.monotonic() + within
    last = None
    while time.monotonic() < deadline:
        assert process.poll() is None, f"{role} exited {process.returncode}:\n{log.read_text()}"
        last = health(env, role)
        if last.returncode == 0:
            return last.stdout
        time.sleep(1)
    pytest.fail(f"{role} never healthy: {last.stderr if last else ''}\n{log.read_text()[-3000:]}")


def test_a_service_not_running_is_unhealthy(env):
    for role in ("web", "broker", "worker", "beat", "rules"):
        result = health(env, role)
        assert result.returncode == 1, role
        assert result.stderr.startswith(f"unhealthy: {role}:"), result.stderr


def test_web_role_serves_the_portal_and_answers_its_health_check(env, tmp_path):
    with running("web", env, tmp_path / "web.log") as process:
        answer = wait_healthy(process, env, "web", tmp_path / "web.log", within=60)
        assert "/healthz" in answer and "ok" in answer
        base = f"http://127.0.0.1:{env['WEB_PORT']}"
        with urllib.request.urlopen(f"{base}/api/schema/", timeout=30) as response:
            assert response.status == 200  # Django itself serves, not only the health route


def test_broker_role_answers_mqtt(env, tmp_path):
    with running("broker", env, tmp_path / "broker.log") as process:
        answer = wait_healthy(process, env, "broker", tmp_path / "broker.log", within=60)
        # The anonymous probe is refused (3.1.1 return code 4 or 5): credentials are checked.
        assert re.search(r"CONNACK return code 0x0[45]", answer), answer


def test_worker_role_answers_celery_ping(env, tmp_path):
    with running("worker", env, tmp_path / "worker.log") as process:
        answer = wait_healthy(process, env, "worker", tmp_path / "worker.log", within=90)
        assert f"worker@{env['WORKER_NODE_HOST']}: pong" in answer


def test_beat_role_runs_and_the_image_healthcheck_finds_its_role(env, tmp_path):
    with running("beat", env, tmp_path / "beat.log") as process:
        wait_healthy(process, env, "beat", tmp_path / "beat.log", within=60)
        # The image's HEALTHCHECK names no role: it reads the one the entrypoint started.
        result = health(env)
        assert result.returncode == 0 and "beat pid" in result.stdout, result.stderr
        assert (Path(env["PLATFORM_STATE_DIR"]) / "role").read_text().strip() == "beat"


def test_migrate_role_migrates_an_empty_database(env, tmp_path):
    db = connection.settings_dict
    name = f"deploy_migrate_{uuid.uuid4().hex[:8]}"
    admin = f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname={db['NAME']}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        env["DATABASE_URL"] = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{name}"
        result = subprocess.run(
            ["sh", str(ENTRYPOINT), "migrate"], env=env, capture_output=True, text=True, timeout=240
        )
        assert result.returncode == 0, result.stdout + result.stderr
        with psycopg.connect(admin.replace(db["NAME"], name)) as conn:
            applied = conn.execute(
                "SELECT count(*) FROM django_migrations WHERE app = 'tenants'"
            ).fetchone()[0]
        assert applied >= 5
        # A job's health is its exit status; while it runs the probe says so.
        assert health(env, "migrate").returncode == 0
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_one_off_command_runs_through_the_entrypoint(env):
    """`entrypoint.sh --manage COMMAND …`: how a deployed platform runs `create_operator`,
    `reseal_secrets` and the like (a one-off task of the migrate task definition,
    infra/README.md), here on the tests' database."""
    email = f"ops-{uuid.uuid4().hex[:6]}@deploy.example"
    result = subprocess.run(
        ["sh", str(ENTRYPOINT), "--manage", "create_operator", email],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    body = json.loads(result.stdout)
    assert body["operator"] == email and body["created"] is True and "/reset/" in body["login_url"]
    refused = subprocess.run(
        ["sh", str(ENTRYPOINT), "--manage"], env=env, capture_output=True, text=True, timeout=60
    )
    assert refused.returncode != 0 and "--manage needs a command" in refused.stderr


def test_billing_role_runs_a_period_to_its_json_summary(env, tmp_path):
    env["BILLING_PERIOD"] = "2026-10"
    env["SPARK_MASTER"] = "local[1]"
    result = subprocess.run(
        ["sh", str(ENTRYPOINT), "billing"], env=env, capture_output=True, text=True, timeout=280
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summary = json.loads(result.stdout)  # stdout carries only the JSON summary
    assert "2026-10" in json.dumps(summary)


@pytest.mark.timeout(400)
def test_rules_role_runs_the_live_job(env, tmp_path):
    env["SPARK_MASTER"] = "local[1]"
    log = tmp_path / "rules.log"
    with running("rules", env, log) as process:
        answer = wait_healthy(process, env, "rules", log, within=180)
        assert "/metrics" in answer
        time.sleep(5)  # the streaming query stays up; a job that gave up would have exited
        assert process.poll() is None, log.read_text()[-3000:]
        # As `docker stop` / ECS do through tini: SIGTERM to the role's process alone.
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=90) == 0, log.read_text()[-3000:]

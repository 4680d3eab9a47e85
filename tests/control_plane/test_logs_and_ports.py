"""One log format for every process (`common/runtime/logs.py`), and the port check of `make run`
(`common/runtime/port_check.py`): the formats themselves, then the web side (Django settings) and a real
Celery worker writing JSON lines with `LOG_FORMAT=json`."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from django.db import connection

from common.runtime import embedded, logs, processes
from common.runtime import port_check as ports

REPO = Path(__file__).resolve().parents[2]


def record(message: str = "refused: acl denied", **fields) -> logging.LogRecord:
    rec = logging.LogRecord("data_plane.refusals", logging.WARNING, __file__, 1, message, (), None)
    rec.fields = fields
    return rec


def test_text_lines_carry_the_fields_as_key_value():
    line = logs.TextFormatter().format(record(tenant="acme", reason="publish 'a b' denied"))
    assert " WARNING data_plane.refusals: refused: acl denied tenant=acme " in line
    assert "reason=\"publish 'a b' denied\"" in line  # quoted: it holds spaces


def test_json_lines_are_one_object_per_record():
    document = json.loads(logs.JsonFormatter().format(record(tenant="acme", reason_code="0x87")))
    assert document["level"] == "WARNING" and document["logger"] == "data_plane.refusals"
    assert document["message"] == "refused: acl denied"
    assert document["tenant"] == "acme" and document["reason_code"] == "0x87"
    assert document["ts"].endswith("+00:00")


def test_an_unknown_format_is_named():
    with pytest.raises(ValueError, match="LOG_FORMAT must be one of text, json"):
        logs.dict_config(fmt="xml")


def test_the_port_check_names_the_holder_and_the_variable():
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        free = embedded.free_port()
        conflicts = ports.check("127.0.0.1", {"MQTT_PORT": port, "WEB_PORT": free})
    assert [c.variable for c in conflicts] == ["MQTT_PORT"]
    message = conflicts[0].message()
    assert f"port {port} (MQTT_PORT) on 127.0.0.1 is in use by pid {os.getpid()}" in message
    assert "make run MQTT_PORT=" in message
    assert ports.check("127.0.0.1", {"WEB_PORT": free}) == []


@pytest.mark.django_db
def test_web_and_worker_log_json_lines_with_log_format_json(tmp_path):
    db = connection.settings_dict
    env = dict(
        os.environ,
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        REDIS_URL=os.environ.get("REDIS_URL") or embedded.redis_url(),
        LOG_FORMAT="json",
        LOG_LEVEL="INFO",
        DJANGO_SETTINGS_MODULE="control_plane.settings",
    )
    web = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, logging; django.setup(); "
            "logging.getLogger('tenants.api').warning('hello', extra={'fields': {'tenant': 'a'}})",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    line = json.loads(web.stderr.strip().splitlines()[-1])
    assert (line["logger"], line["message"], line["tenant"]) == ("tenants.api", "hello", "a")

    # The web role as it runs (Daphne): its access log is in the same format.
    port = embedded.free_port()
    log = tmp_path / "web.log"
    with open(log, "w") as err:
        daphne = subprocess.Popen(
            processes.command("web", {**env, "WEB_PORT": str(port), "BIND_HOST": "127.0.0.1"}),
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    access = None
    try:
        deadline = time.monotonic() + 60
        while not embedded.port_open(port):
            assert daphne.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        urllib.request.urlopen(f"http://127.0.0.1:{port}/login/", timeout=10).read()
        while access is None and time.monotonic() < deadline:
            for text in log.read_text().splitlines():
                if text.startswith("{") and json.loads(text)["logger"] == "control_plane.access":
                    access = json.loads(text)
            time.sleep(0.2)
    finally:
        daphne.terminate()
        daphne.wait(timeout=30)
    assert access is not None
    assert (access["method"], access["path"], access["status"]) == ("GET", "/login/", 200)

    node = f"logs-test-{uuid.uuid4().hex[:8]}@localhost"
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "control_plane", "worker", "--hostname", node]
        + ["--concurrency", "1", "--loglevel", "INFO", "--pool", "solo"],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    documents = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            text = worker.stderr.readline()
            if not text:
                break
            if text.startswith("{"):
                documents.append(json.loads(text))
                if "ready" in documents[-1]["message"]:
                    break
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    assert any("ready" in d["message"] for d in documents), documents
    assert all(d["logger"].startswith("celery") for d in documents)

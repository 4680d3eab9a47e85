"""The sinks' far ends, real: moto's server (S3, SQS, Kinesis), a database of the tenant's own
on the embedded Postgres, Mosquitto, an HTTP receiver. Every far end is on loopback, which an
operator allows as the webhook tests do (`WEBHOOK_ALLOW`)."""

from __future__ import annotations

import getpass
import json
import socket
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bench.outage import Outage  # noqa: F401  (the sinks' tests cut far ends off with it)
from common.sinks import Record

MOSQUITTO = "/usr/sbin/mosquitto"
HOUR_MS = 3_600_000
T0 = 1_796_644_800_000  # 2026-12-07T12:00:00Z


def record(id: int, output: dict[str, Any], key: str = "dev-1", ts_ms: int = T0) -> Record:
    """An outbox row as the delivery lane hands it over."""
    return Record(id, key, json.dumps(output, separators=(",", ":")), ts_ms, output)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(autouse=True)
def loopback_allowed(monkeypatch):
    monkeypatch.setenv("WEBHOOK_ALLOW", "127.0.0.1")  # as an operator allows local far ends
    monkeypatch.delenv("WEBHOOK_ALLOW_PRIVATE", raising=False)


@pytest.fixture
def aws(s3_endpoint) -> dict[str, Any]:
    """An action's AWS settings for moto (its own credentials, not the environment's)."""
    return {
        "endpoint_url": s3_endpoint,
        "region": "us-east-1",
        "access_key_id": "sinktest",
        "secret_access_key": "sinktest-secret",
    }


@pytest.fixture
def boto(aws):
    """A boto3 client of moto for the test's own reading and setting up."""
    import boto3

    def client(service: str):
        return boto3.client(
            service,
            endpoint_url=aws["endpoint_url"],
            region_name="us-east-1",
            aws_access_key_id="test",
            aws_secret_access_key="test",
        )

    return client


@pytest.fixture(scope="session")
def tenant_dsn() -> Iterator[str]:
    """A database of the tenant's own on the suite's embedded cluster (not the platform's)."""
    from django.db import connection

    db = connection.settings_dict
    admin = f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname=postgres"
    name = f"sink_tenant_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql://{db['USER']}@{db['HOST']}:{db['PORT']}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Mosquitto:
    """Mosquitto on a loopback port; anonymous clients may publish under `ok/` only (its ACL),
    read anything. `stop()` and `start()` keep the port."""

    def __init__(self, folder: Path, tls: tuple[Path, Path] | None = None) -> None:
        self.port = free_port()
        acl = folder / "acl"
        acl.write_text("topic readwrite ok/#\ntopic read #\n")
        self.config = folder / "mosquitto.conf"
        self.config.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence false\n"
            f"acl_file {acl}\nlog_type error\nuser {getpass.getuser()}\n"  # reads the ACL as us
            + (f"certfile {tls[0]}\nkeyfile {tls[1]}\n" if tls else "")
        )
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            [MOSQUITTO, "-c", str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return
            except OSError:
                assert time.monotonic() < deadline, "mosquitto did not start"
                time.sleep(0.05)

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None


@pytest.fixture
def mosquitto(tmp_path) -> Iterator[Mosquitto]:
    broker = Mosquitto(tmp_path)
    yield broker
    broker.stop()


@pytest.fixture
def tls_mosquitto(tmp_path) -> Iterator[tuple[Mosquitto, Path]]:
    """Mosquitto over TLS with a self-signed certificate for 127.0.0.1; yields it and the
    certificate (which no system trusts)."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    broker = Mosquitto(tmp_path, tls=(cert, key))
    yield broker, cert
    broker.stop()


class Receiver:
    """A real HTTP server recording each request; answers `statuses` in turn (then 200), with
    `answer` as the body (JSON) when given."""

    def __init__(self, statuses: list[int] | None = None, answer: Any = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.statuses = list(statuses or [])
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                receiver.calls.append({"body": body, "headers": dict(self.headers)})
                payload = b"" if receiver.answer is None else json.dumps(receiver.answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.answer = answer
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        self.url = f"http://127.0.0.1:{self.port}/batches"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()

"""The Spark suite's shared parts (the one SparkSession is `spark` in tests/conftest.py): tiny
archives written with pyarrow exactly as the layout protocol says, and a real HTTP receiver for
webhooks."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.archive.schema import ARCHIVE_SCHEMA, EVENT_PUBLISH, live_segment_key
from common.stores.object_store import LocalObjectStore


@pytest.fixture(autouse=True)
def loopback_receivers(monkeypatch):
    """The receivers here listen on loopback, which webhooks may call only where an operator
    allows it (`WEBHOOK_ALLOW`; common.webhooks.destinations): as an operator would for a local one."""
    monkeypatch.setenv("WEBHOOK_ALLOW", "127.0.0.1")


@pytest.fixture
def store(tmp_path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "objects")


def message(
    tenant: str,
    topic: str,
    payload: bytes | str | dict,
    ts_ms: int,
    *,
    client_id: str = "dev-1",
    qos: int = 0,
    event: str = EVENT_PUBLISH,
) -> dict:
    if isinstance(payload, dict):
        payload = json.dumps(payload)
    if isinstance(payload, str):
        payload = payload.encode()
    return {
        "event": event,
        "tenant": tenant,
        "ts": ts_ms,
        "client_id": client_id,
        "username": f"{tenant}/{client_id}",
        "topic": topic,
        "qos": qos,
        "retain": False,
        "payload": payload,
        "user_properties": [],
    }


def parquet_bytes(rows: list[dict]) -> bytes:
    buffer = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows, schema=ARCHIVE_SCHEMA), buffer)
    return buffer.getvalue().to_pybytes()


_SEQUENCE = iter(range(1, 10**9))


def write_live(store, rows: list[dict], writer: str = "broker-a") -> str:
    """One live segment, as a broker writes it (all tenants together)."""
    key = live_segment_key(rows[0]["ts"], writer, next(_SEQUENCE))
    store.put(key, parquet_bytes(rows))
    return key


class Receiver:
    """A real HTTP server recording POSTs; answers `status` (a list pops one per request)."""

    def __init__(self, statuses: list[int] | None = None, port: int = 0) -> None:
        self.calls: list[dict] = []
        self.statuses = list(statuses or [])
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                receiver.calls.append(
                    {
                        "body": body,
                        "headers": dict(self.headers),
                        "path": self.path,
                        "at": time.time(),
                        "status": status,
                    }
                )
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def ok_calls(self) -> list[dict]:
        return [c for c in self.calls if c["status"] == 200]

    def wait(self, count: int, timeout: float) -> list[dict]:
        deadline = time.monotonic() + timeout
        while len(self.ok_calls()) < count:
            assert time.monotonic() < deadline, f"{len(self.ok_calls())} webhook calls"
            time.sleep(0.05)
        return self.ok_calls()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def signature_ok(call: dict, secret: str) -> bool:
    expected = hmac.new(secret.encode(), call["body"], hashlib.sha256).hexdigest()
    return call["headers"].get("X-Signature-256") == f"sha256={expected}"


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


def database_url() -> str:
    from django.db import connection

    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def read_parquet_dir(path: Path) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in sorted(path.rglob("*.parquet"))])


def rule_usage(store, tenant: str) -> tuple[int, int]:
    """(rules triggered, actions executed) of `tenant` in the usage log under `store`."""
    import io

    triggered = executed = 0
    for key in store.list("usage/"):
        for row in pq.read_table(io.BytesIO(store.get(key))).to_pylist():
            if row["tenant"] == tenant:
                triggered += row["rules_triggered"]
                executed += row["actions_executed"]
    return triggered, executed

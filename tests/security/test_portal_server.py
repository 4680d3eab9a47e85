"""The portal's web server as operators run it (the `web` role of `common/runtime/processes.py`), from the
attacker's side, over raw sockets on loopback (issue 28, point 6):

- slow clients: connections that never finish their request headers or body (one byte at a time,
  or nothing at all) are closed within the configured deadline, while normal requests are served;
- forged `X-Forwarded-For`: a client that rotates the header still meets the per-address login
  throttle (the server believes the header only from `TRUSTED_PROXIES`)."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from django.db import connection

from common.runtime import embedded, processes

# The server under test reads the test database; the mark makes pytest-django create it.
pytestmark = pytest.mark.django_db
REPO = Path(__file__).resolve().parents[2]
DEADLINE = 2.0  # WEB_HEADER_TIMEOUT and WEB_BODY_TIMEOUT for the server under test
SLACK = 3.0  # scheduling on a loaded 2-core machine


@pytest.fixture(scope="module")
def web(django_db_setup, django_db_blocker, tmp_path_factory):
    """The web role started from the table of processes, on the test database."""
    with django_db_blocker.unblock():
        db = connection.settings_dict
    env = dict(
        os.environ,
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        REDIS_URL=os.environ.get("REDIS_URL") or embedded.redis_url(),
        DJANGO_SETTINGS_MODULE="control_plane.settings",
        WEB_HEADER_TIMEOUT=str(DEADLINE),
        WEB_BODY_TIMEOUT=str(DEADLINE),
        AUTH_THROTTLE_RATE="5/min",
        AUTH_ACCOUNT_THROTTLE_RATE="100/min",
    )
    port = embedded.free_port()
    env.update(WEB_PORT=str(port), BIND_HOST="127.0.0.1")
    log = tmp_path_factory.mktemp("web") / "web.log"
    with open(log, "w") as err:
        server = subprocess.Popen(
            processes.command("web", env),
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        deadline = time.monotonic() + 60
        while not embedded.port_open(port):
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)
        print(log.read_text()[-5000:])  # shown when a test fails


def _get(port: int, path: str, timeout: float = 5.0) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as response:
        return response.status


def test_forged_x_forwarded_for_does_not_reset_the_login_throttle(web):
    codes = []
    for i in range(12):
        request = urllib.request.Request(
            f"http://127.0.0.1:{web}/api/v1/auth/token",
            data=json.dumps({"email": f"u{i}@x.io", "password": "guess"}).encode(),
            headers={"Content-Type": "application/json", "X-Forwarded-For": f"10.9.{i}.{i}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                codes.append(response.status)
        except urllib.error.HTTPError as error:
            codes.append(error.code)
    assert codes[:5] == [401] * 5 and set(codes[5:]) == {429}, codes


class _Slow:
    """One attacker connection: `kind` is idle (sends nothing), headers (a request line, then one
    header byte at a time) or body (complete headers announcing 10 kB, then one byte at a time)."""

    OPENINGS = {
        "idle": b"",
        "headers": b"GET /login/ HTTP/1.1\r\nHost: 127.0.0.1\r\n",
        "body": (
            b"POST /api/v1/auth/token HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 10000\r\n\r\n"
        ),
    }
    DRIBBLE = {"idle": b"", "headers": b"X", "body": b" "}

    def __init__(self, port: int, kind: str) -> None:
        self.kind = kind
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.opened_at = time.monotonic()
        self.sock.setblocking(False)
        self.closed_at: float | None = None
        self.answer = b""
        if self.OPENINGS[kind]:
            self.sock.sendall(self.OPENINGS[kind])

    def dribble(self, now: float) -> None:
        if self.closed_at is None and self.DRIBBLE[self.kind]:
            try:
                self.sock.send(self.DRIBBLE[self.kind])
            except OSError:  # reset or broken pipe: the server closed it
                self.closed_at = now

    def read(self, now: float) -> None:
        try:
            data = self.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.answer += data
        else:
            self.closed_at = now


def test_slow_clients_are_closed_within_the_deadline_while_others_are_served(web):
    served: list[float] = []
    failures: list[str] = []
    stop = threading.Event()

    def normal_user() -> None:
        while not stop.is_set():
            began = time.monotonic()
            try:
                assert _get(web, "/healthz", timeout=5) == 200
                served.append(time.monotonic() - began)
            except Exception as exc:  # noqa: BLE001 - reported below
                failures.append(repr(exc))
            time.sleep(0.3)

    kinds = ["idle"] * 60 + ["headers"] * 70 + ["body"] * 70  # 200 connections
    opened = time.monotonic()
    slow = [_Slow(web, kind) for kind in kinds]
    user = threading.Thread(target=normal_user, daemon=True)
    user.start()
    try:
        while time.monotonic() - opened < DEADLINE + SLACK + 15:
            now = time.monotonic()
            for conn in slow:
                conn.dribble(now)
            live = [c for c in slow if c.closed_at is None]
            if not live:
                break
            readable, _, _ = select.select([c.sock for c in live], [], [], 0.25)
            now = time.monotonic()
            for conn in live:
                if conn.sock in readable:
                    conn.read(now)
    finally:
        stop.set()
        user.join(timeout=10)
        for conn in slow:
            conn.sock.close()

    still_open = [c.kind for c in slow if c.closed_at is None]
    assert not still_open, f"{len(still_open)} of 200 still open: {set(still_open)}"
    lasted = sorted(c.closed_at - c.opened_at for c in slow)  # each from its own connect
    print("closed after", round(lasted[0], 2), "to", round(lasted[-1], 2), "s")
    assert lasted[0] >= DEADLINE - 0.5, lasted[:5]  # the deadline, not a blanket refusal
    assert lasted[-1] <= DEADLINE + SLACK, lasted[-5:]
    # A request left unfinished is told why before the close.
    untold = [
        (c.kind, c.answer[:40]) for c in slow if c.kind != "idle" and b" 408 " not in c.answer
    ]
    assert not untold, untold[:5]
    assert not failures, failures[:3]
    assert len(served) >= 5 and max(served) < 2.0, served


def test_a_steady_upload_longer_than_the_deadline_is_served(web):
    """The body deadline grows with what arrives (500 bytes/s buys a second): a slow but honest
    upload of 4 kB at 1 kB/s (twice the deadline) gets its answer."""
    body = json.dumps({"email": "slow@x.io", "password": "p", "pad": "a" * 4000}).encode()
    sock = socket.create_connection(("127.0.0.1", web), timeout=10)
    try:
        sock.sendall(
            b"POST /api/v1/auth/token HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        )
        for start in range(0, len(body), 250):
            sock.sendall(body[start : start + 250])
            time.sleep(0.25)
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    finally:
        sock.close()
    status = answer.split(b"\r\n", 1)[0]
    assert status.startswith(b"HTTP/1.1 4") and b"408" not in status, status  # 400 or 429

"""The platform as `make run` starts it, once for the whole end-to-end suite: the same supervisor
(`manage.py runplatform`, what the `run` target of the Makefile executes) and its roles (web,
broker, worker, beat, rules) as real processes on the embedded Postgres and Redis, in folders
and on ports of this test session. The tests drive it only from outside, as a user does: HTTP
to the portal and the REST API, MQTT clients, Chromium, the `manage.py` commands an operator
runs beside it. No test double crosses a process boundary here.

When the session ends the platform gets SIGINT (Ctrl-C), and the suite checks that it stopped
everything it started. Every module here is marked `e2e` (`pytestmark`): `make test` runs them
last, in a pytest run of their own (the platform, with two JVMs among its processes, lives for
the whole session: it must not load the machine beside the parallel tests or the `serial`
latency tests)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests

from common.runtime import embedded
from tests.make_run_env import make_run_environment, marked_processes

REPO = Path(__file__).resolve().parents[2]
PORT_VARIABLES = (
    "WEB_PORT",
    "MQTT_PORT",
    "MQTT_WS_PORT",
    "MQTT_TLS_PORT",
    "METRICS_PORT",
    "RULES_METRICS_PORT",
)
STARTUP_SECONDS = 420  # a cold machine: migrations, two JVMs (the rules job and its first plan)


@dataclass
class Platform:
    """What `make run` printed and where it listens; helpers to reach it as a user would."""

    env: dict[str, str]
    folder: Path
    log: Path
    process: subprocess.Popen
    banner: str = ""
    demo: dict[str, str] = field(default_factory=dict)

    def port(self, variable: str) -> int:
        return int(self.env[variable])

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port('WEB_PORT')}{path}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def api(self, token: str | None = None) -> Api:
        return Api(self.url(""), token)

    def manage(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """An operator's `python manage.py …` beside the running platform: with DATABASE_URL
        unset, the embedded database `make run` started (CONTRACT: the command line)."""
        env = {k: v for k, v in self.env.items() if k not in ("DATABASE_URL", "REDIS_URL")}
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def mail_link(self, to: str, path_part: str, within: float = 30) -> str:
        """The link in the last mail to `to` the console printed (mail goes to the console until
        EMAIL_HOST names an SMTP server: README)."""
        deadline = time.monotonic() + within
        while True:
            text = self.output()
            mails = [m for m in text.split("Subject: ") if f"To: {to}" in m]
            links = re.findall(r"https?://\S+", mails[-1]) if mails else []
            links = [link for link in links if path_part in link]
            if links:
                return links[-1]
            assert time.monotonic() < deadline, f"no mail to {to} with {path_part}: {text[-3000:]}"
            time.sleep(0.3)


class Api:
    """The REST API over HTTP with a bearer token, as curl or a user's script calls it."""

    def __init__(self, base: str, token: str | None) -> None:
        self.base = base
        self.session = requests.Session()
        if token:
            self.session.headers["Authorization"] = f"Bearer {token}"

    def __call__(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", 60)
        return self.session.request(method, self.base + path, **kwargs)

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self("GET", path, **kwargs)

    def post(self, path: str, body: Any = None, **kwargs: Any) -> requests.Response:
        return self("POST", path, json=body, **kwargs)

    def put(self, path: str, body: Any = None, **kwargs: Any) -> requests.Response:
        return self("PUT", path, json=body, **kwargs)

    def patch(self, path: str, body: Any = None, **kwargs: Any) -> requests.Response:
        return self("PATCH", path, json=body, **kwargs)

    def delete(self, path: str, **kwargs: Any) -> requests.Response:
        return self("DELETE", path, **kwargs)


def _environment(folder: Path) -> dict[str, str]:
    """`make run`'s environment on its embedded defaults, in this session's folders and on free
    ports; the few settings an operator gives a laptop install: loopback webhooks allowed (the
    suite's receivers listen there), budgets checked every 3 s instead of 60, and a TLS port
    (the development CA `make run` makes)."""
    return make_run_environment(
        folder,
        PORT_VARIABLES,
        WEBHOOK_ALLOW="127.0.0.1",
        BUDGET_CHECK_SECONDS="3",  # an operator's knob: budget alerts within seconds
    )


@pytest.fixture(scope="session")
def platform() -> Iterator[Platform]:
    # Under .data (not /tmp): the embedded Postgres runs as the `postgres` user, who may enter it.
    folder = embedded.DATA_DIR / "e2e" / uuid.uuid4().hex[:12]
    folder.mkdir(parents=True)
    env = _environment(folder)
    log = folder / "make-run.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "runplatform"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    running = Platform(env=env, folder=folder, log=log, process=process)
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while "MQTT platform is up" not in running.output() or "(move one with" not in (
            running.output()
        ):
            assert process.poll() is None, f"make run exited: {running.output()[-5000:]}"
            assert time.monotonic() < deadline, f"not up: {running.output()[-5000:]}"
            time.sleep(0.5)
        running.banner = running.output()
        running.demo = _demo(running.banner)
        yield running
    finally:
        stopped = _stop(running)
        leftovers = marked_processes(env["RUNPLATFORM_TEST_MARKER"])
        for line in leftovers:  # never leave a platform running for the next session
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
        if stopped and not leftovers:
            shutil.rmtree(folder, ignore_errors=True)
    assert stopped, f"make run did not stop on Ctrl-C: {running.output()[-3000:]}"
    assert leftovers == [], leftovers


def _stop(running: Platform) -> bool:
    """Ctrl-C (SIGINT) to the supervisor; True when it ended with 0 in time."""
    process = running.process
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=90)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            return False
    return process.returncode == 0


def _demo(banner: str) -> dict[str, str]:
    found = {
        "username": re.search(r"demo device +username (\S+)", banner),
        "password": re.search(r"password (\S+)\n", banner),
        "login": re.search(r"demo portal login +(\S+) / (\S+)", banner),
    }
    assert all(found.values()), banner
    login = found["login"]
    return {
        "username": found["username"].group(1),  # type: ignore[union-attr]
        "password": found["password"].group(1),  # type: ignore[union-attr]
        "email": login.group(1),  # type: ignore[union-attr]
        "portal_password": login.group(2),  # type: ignore[union-attr]
    }


@pytest.fixture(scope="session")
def tenant(platform: Platform) -> dict[str, Any]:
    """A tenant signed up through the REST API (as the README's first steps do), its owner's
    token, and the API client holding it."""
    email = "owner@e2e-acme.io"
    password = "a long e2e passphrase"
    answer = platform.api().post(
        "/api/v1/signup", {"tenant": "e2e-acme", "email": email, "password": password}
    )
    assert answer.status_code == 201, answer.text
    body = answer.json()
    return {
        "slug": body["tenant"]["slug"],
        "email": email,
        "password": password,
        "token": body["token"],
        "api": platform.api(body["token"]),
        "signup": body,
    }


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def eventually(fetch: Callable[[], Any], done: Callable[[Any], bool], within: float = 60) -> Any:
    """`fetch()` again every half second until `done` says yes (the value), or fail with the
    last value after `within` seconds: what a person does refreshing a page."""
    deadline = time.monotonic() + within
    while True:
        value = fetch()
        if done(value):
            return value
        assert time.monotonic() < deadline, value
        time.sleep(0.5)

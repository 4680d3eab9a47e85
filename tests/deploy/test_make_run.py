"""`make run` cannot trip: a port already taken is named with who holds it and the variable that
moves it, the command exits non-zero without a traceback and leaves nothing running; the banner
comes once every listener answers and lists each address, `/metrics` included, and each role it
supervises answers its image health check; Ctrl-C in a terminal ends `make run` with exit 0 and
stops everything it started, the embedded Postgres and Redis included — and leaves those it
found running. Real processes, a real pseudo-terminal."""

from __future__ import annotations

import contextlib
import os
import pty
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.runtime import embedded
from control_plane.management.commands.runplatform import Command
from tests import make_run_env
from tests.deploy.test_parent_watch import default_signals
from tests.make_run_env import make_run_environment

REPO = Path(__file__).resolve().parents[2]
PORT_VARIABLES = ("WEB_PORT", "MQTT_PORT", "MQTT_WS_PORT", "METRICS_PORT", "RULES_METRICS_PORT")


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A folder the `postgres` user may enter (a root-run test's own tmp_path is private)."""
    folder = embedded.DATA_DIR / "test-make-run" / uuid.uuid4().hex[:12]
    folder.mkdir(parents=True)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def run_env(tmp_path) -> dict[str, str]:
    """`make run`'s environment on its embedded defaults, in folders of this test, on free ports,
    with a marker every process it starts inherits (to find any left behind)."""
    return make_run_environment(
        tmp_path, PORT_VARIABLES, MQTT_SERVICE_KEY="make-run-test-key", SPARK_MASTER="local[1]"
    )


def marked_processes(env: dict[str, str]) -> list[str]:
    """Processes still carrying this test's marker: what `make run` started and left."""
    return make_run_env.marked_processes(env["RUNPLATFORM_TEST_MARKER"])


def answers(port: int) -> bool:
    return embedded.port_open(port)


def postgres_running(folder: Path) -> bool:
    port_file = folder / "port"
    return (folder / "cluster" / "postmaster.pid").exists() or (
        port_file.exists() and answers(int(port_file.read_text()))
    )


def redis_running(folder: Path) -> bool:
    port_file = folder / "port"
    return port_file.exists() and answers(int(port_file.read_text()))


def runplatform(
    env: dict[str, str], *options: str, timeout: float = 180
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "manage.py", "runplatform", *options],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_a_port_taken_is_named_and_nothing_is_left_running(run_env, tmp_path):
    taken = int(run_env["MQTT_WS_PORT"])
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        result = runplatform(run_env)
        output = result.stdout + result.stderr
        assert result.returncode == 2, output
        assert f"port {taken} (MQTT_WS_PORT)" in result.stderr
        assert f"in use by pid {os.getpid()}" in result.stderr  # who holds it
        assert "make run MQTT_WS_PORT=" in result.stderr  # how to move it
        assert "Traceback" not in output
        assert "is up" not in output
    # It had started the embedded Postgres (settings need it) and stopped it again.
    assert "stopped the embedded Postgres it had started" in result.stdout
    assert not postgres_running(tmp_path / "postgres")
    assert not redis_running(tmp_path / "redis")
    for name in PORT_VARIABLES:
        assert not answers(int(run_env[name])), f"{name} still answers"
    assert marked_processes(run_env) == []


def test_a_port_given_twice_and_a_bad_value_are_refused(run_env):
    run_env["METRICS_PORT"] = run_env["WEB_PORT"]
    result = runplatform(run_env)
    assert result.returncode == 2
    assert "(METRICS_PORT)" in result.stderr and "also given to WEB_PORT" in result.stderr
    run_env["METRICS_PORT"] = "nine"
    result = runplatform(run_env)
    assert result.returncode == 2 and "METRICS_PORT='nine' is not a port number" in result.stderr
    del run_env["METRICS_PORT"]
    # An option moves a port as its variable does (`runplatform --mqtt-port N`).
    result = runplatform(run_env, "--mqtt-port", run_env["WEB_PORT"])
    assert result.returncode == 2
    assert "(MQTT_PORT)" in result.stderr and "also given to WEB_PORT" in result.stderr
    assert "Traceback" not in result.stderr
    assert marked_processes(run_env) == []


def test_services_found_running_are_left_running(run_env, tmp_path, monkeypatch):
    monkeypatch.setenv("EMBEDDED_PG_DIR", run_env["EMBEDDED_PG_DIR"])
    embedded.postgres_url()  # running before `make run`
    try:
        squatter = socket.create_server(("127.0.0.1", int(run_env["WEB_PORT"])))
        with squatter:
            result = runplatform(run_env)
        assert result.returncode == 2
        assert "left the embedded Postgres running" in result.stdout, result.stdout
        assert postgres_running(tmp_path / "postgres")
    finally:
        embedded.stop_postgres()


def role_probe_env(run_env: dict[str, str], folder: Path) -> dict[str, str]:
    """The environment a role's health check reads, pointed at what `make run` started."""
    redis_port = (folder / "redis" / "port").read_text().strip()
    return {**run_env, "BIND_HOST": "127.0.0.1", "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0"}


def health(env: dict[str, str], role: str) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "common.runtime.processes", "--health", role]
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=60, cwd=REPO)


def read_until(fd: int, needle: bytes, within: float, buffer: bytearray) -> bool:
    deadline = time.monotonic() + within
    while needle not in buffer and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the other side closed
                return needle in buffer
            if not chunk:
                break
            buffer += chunk
    return needle in buffer


def test_make_run_is_up_when_it_says_so_and_ctrl_c_ends_it_cleanly(run_env, tmp_path):
    pid, fd = pty.fork()
    if pid == 0:  # the child: `make run` in a terminal, as a user starts it
        default_signals()
        os.chdir(REPO)
        os.execvpe("make", ["make", "run"], run_env)
    output = bytearray()
    try:
        assert read_until(fd, b"MQTT platform is up", 400, output), output.decode(errors="replace")
        # The banner comes once the listeners are bound: each address it lists answers now.
        read_until(fd, b"move one with", 10, output)
        banner = output.decode(errors="replace")
        for name in PORT_VARIABLES:
            port = run_env[name]
            assert f":{port}" in banner, f"{name} missing from the banner"
            assert answers(int(port)), f"{name} ({port}) not listening when the banner came"
        metrics = f"http://127.0.0.1:{run_env['METRICS_PORT']}/metrics"
        assert metrics in banner
        text = urllib.request.urlopen(metrics, timeout=5).read().decode()
        assert "# HELP mqtt_refusals_total" in text and "mqtt_messages_received" in text
        assert "Traceback" not in banner
        # No Django debug page (traceback, settings, URL list) for whoever asks (issue 29).
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{run_env['WEB_PORT']}/no-such-page/")
        except urllib.error.HTTPError as missing:
            page = missing.read().decode(errors="replace")
            assert missing.code == 404 and "URLconf" not in page and "DEBUG" not in page, page
        else:
            raise AssertionError("a page that does not exist was served")
        # Each role it supervises answers the health check the image's HEALTHCHECK runs.
        probe = role_probe_env(run_env, tmp_path)
        for role in Command.roles:
            said = health(probe, role)
            assert said.returncode == 0, f"{role}: {said.stderr}"
        assert re.search(r"demo portal login +demo@example\.com / \S{8,}", banner), banner

        os.write(fd, b"\x03")  # Ctrl-C, through the terminal
        read_until(fd, b"stopped the embedded Postgres", 120, output)
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            read_until(fd, b"\0never", 0.5, output)
        assert status is not None and done, "make run still running after Ctrl-C"
        pid = 0
        text = output.decode(errors="replace")
        assert os.waitstatus_to_exitcode(status) == 0, text[-3000:]
        assert "make: ***" not in text
        assert "stopped the embedded Redis it had started" in text
        assert "stopped the embedded Postgres it had started" in text
    finally:
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    for name in PORT_VARIABLES:
        assert not answers(int(run_env[name])), f"{name} still answers after Ctrl-C"
    for role in ("web", "broker"):
        assert health(probe, role).returncode == 1, f"{role} still healthy after Ctrl-C"
    assert not postgres_running(tmp_path / "postgres")
    assert not redis_running(tmp_path / "redis")
    assert marked_processes(run_env) == []


def test_a_signal_to_make_alone_stops_everything_and_celery_keeps_quiet(run_env, tmp_path):
    # Issue 41: `kill -INT` (or -TERM) of the make process, not through a terminal, stops
    # everything as Ctrl-C does (make alone would wait for its child for ever on SIGINT). And at
    # LOG_LEVEL WARNING the console carries no Celery banner nor its root warning.
    log = tmp_path / "console.log"
    with open(log, "wb") as console:
        make = subprocess.Popen(
            ["make", "run"],
            cwd=REPO,
            env=run_env,
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: the signal goes to make's pid alone
            preexec_fn=default_signals,
        )
    try:
        deadline = time.monotonic() + 400
        while b"MQTT platform is up" not in log.read_bytes():
            assert make.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        time.sleep(3)  # what the parts print once up (Celery's worker banner comes late)
        os.kill(make.pid, signal.SIGINT)
        make.wait(timeout=120)
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.wait()
    text = log.read_text(errors="replace")
    assert make.returncode == -signal.SIGINT, text[-3000:]  # make dies of it, as make does
    assert "make got SIGINT: stopping" in text
    assert "stopped the embedded Postgres it had started" in text
    assert "stopped the embedded Redis it had started" in text
    assert "Traceback" not in text
    for noise in ("-------------- worker@", "[queues]", "celery beat v", "superuser privileges"):
        assert noise not in text, f"{noise!r} on the console at LOG_LEVEL WARNING"
    for name in PORT_VARIABLES:
        assert not answers(int(run_env[name])), f"{name} still answers"
    assert not postgres_running(tmp_path / "postgres")
    assert not redis_running(tmp_path / "redis")
    assert marked_processes(run_env) == []

"""The table of processes: every role the platform runs, its command line and its health check.

Declared once, used everywhere a process is started: `make run` (`runplatform`), `runbroker`,
the container entrypoint (`docker/entrypoint.sh ROLE` → `python -m common.runtime.processes ROLE`),
compose and the Terraform task definitions (which pass only the ROLE), bench/ and the tests.

A command line is a function of the environment, so one table serves a laptop and a container:

| variable | used by | default |
|---|---|---|
| `BIND_HOST` | web, broker | `127.0.0.1` (a container sets `0.0.0.0`) |
| `WEB_PORT` | web | `8000` |
| `WEB_HEADER_TIMEOUT`, `WEB_BODY_TIMEOUT`, `WEB_BODY_MIN_RATE` | web: a request's headers and body must arrive in time (`control_plane/web_server.py`) | `20` s, `20` s + 1 s per `500` bytes |
| `MQTT_PORT`, `MQTT_WS_PORT` | broker | `1883`, `8083` |
| `BROKER_WORKERS` | broker: processes sharing its ports (a cluster on `REDIS_URL`) | `1` |
| `MQTT_TLS_PORT`, `MQTT_WSS_PORT`, `METRICS_PORT` | broker | off (`make run`: `METRICS_PORT` 9100) |
| `RULES_METRICS_PORT`, `RULES_CHECKPOINT` | rules (`/metrics`, streaming checkpoint) | `9101`, the job's default |
| `LOG_LEVEL`, `LOG_FORMAT` | every role (`common/runtime/logs.py`); WARNING or above also keeps Celery's banners and root warning off the console (`quiet`) | `INFO`, `text` (or `json`) |
| `WORKER_CONCURRENCY` | worker | `2` |
| `PLATFORM_STATE_DIR` | beat (schedule, pid file) | `.data` of the checkout |
| `BILLING_PERIOD` | billing | the previous calendar month (UTC) |

`python -m common.runtime.processes ROLE [ARG…]` replaces itself with the role's process (extra
arguments are appended), `--health [ROLE]` probes it (exit 0 when healthy; the role defaults to
`PLATFORM_ROLE`, then to the role last started under `PLATFORM_STATE_DIR`), `--print ROLE`
shows the command line, `--list` prints the table as JSON. `--manage COMMAND [ARG…]` runs a
one-off `manage.py COMMAND` instead of a role (`create_operator`, `reseal_secrets`, …): a deployed
platform runs it in the `migrate` task definition, whose task has the database and the keys.

This module imports nothing of the project (it starts the project's commands as processes).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import socket
import sys
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import common

REPO_DIR = Path(common.__file__).resolve().parent.parent  # the checkout, at any depth
MANAGE = str(REPO_DIR / "manage.py")

Env = Mapping[str, str]


def _get(env: Env, name: str, default: str) -> str:
    return env.get(name) or default


def state_dir(env: Env) -> Path:
    """Where processes keep small local state (beat's schedule and pid file)."""
    return Path(_get(env, "PLATFORM_STATE_DIR", str(REPO_DIR / ".data")))


def previous_month(today: dt.date | None = None) -> str:
    today = today or dt.datetime.now(dt.UTC).date()
    last = today.replace(day=1) - dt.timedelta(days=1)
    return f"{last.year:04d}-{last.month:02d}"


def worker_node_name(env: Env) -> str:
    """The Celery node name the worker takes, and that its health check pings."""
    return f"worker@{_get(env, 'WORKER_NODE_HOST', socket.gethostname())}"


# --- command lines --------------------------------------------------------------------------


def _web(env: Env, python: str) -> list[str]:
    return [
        python,
        "-m",
        # Daphne with deadlines on slow clients' requests (WEB_HEADER_TIMEOUT, WEB_BODY_TIMEOUT).
        "control_plane.web_server",
        "-b",
        _get(env, "BIND_HOST", "127.0.0.1"),
        "-p",
        _get(env, "WEB_PORT", "8000"),
        # No --proxy-headers: Daphne would believe X-Forwarded-For from anyone. Django believes
        # it only from TRUSTED_PROXIES (tenants/client_address.py). The access log is
        # Django's (control_plane/access_log.py), in the platform's format.
        "control_plane.asgi:application",
    ]


def _broker(env: Env, python: str) -> list[str]:
    argv = [
        python,
        MANAGE,
        "runbroker",
        "--host",
        _get(env, "BIND_HOST", "127.0.0.1"),
        "--port",
        _get(env, "MQTT_PORT", "1883"),
        "--ws-port",
        _get(env, "MQTT_WS_PORT", "8083"),
    ]
    for flag, name in (
        ("--tls-port", "MQTT_TLS_PORT"),
        ("--wss-port", "MQTT_WSS_PORT"),
        ("--metrics-port", "METRICS_PORT"),
        ("--workers", "BROKER_WORKERS"),
    ):
        if env.get(name):
            argv += [flag, env[name]]
    return argv


def supervise(commands: Sequence[Sequence[str]], restart_delay: float = 1.0) -> int:
    """Run several processes as one (`runbroker --workers N`): SIGTERM/SIGINT reach every one
    and the supervisor returns once all are gone; one that dies on its own is started again
    after `restart_delay` (its clients reconnect to the others meanwhile: they share the port).
    Returns the exit status of the first process that ended when told to."""
    import signal
    import subprocess
    import time

    children = [subprocess.Popen(list(argv)) for argv in commands]
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not stopping:
            for index, child in enumerate(children):
                status = child.poll()
                if status is not None and not stopping:
                    print(
                        f"worker {index} (pid {child.pid}) exited with {status}: restarting",
                        file=sys.stderr,
                        flush=True,
                    )
                    time.sleep(restart_delay)
                    children[index] = subprocess.Popen(list(commands[index]))
            time.sleep(0.2)
        return max((child.wait() for child in children), default=0)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


# Levels by name, as `logging` reads LOG_LEVEL (common/runtime/logs.py).
_LEVELS = {"CRITICAL": 50, "FATAL": 50, "ERROR": 40, "WARNING": 30, "WARN": 30, "INFO": 20}
# Celery's warning, printed by Python's `warnings` (not a log record), that the worker runs as
# root: true of every container and many development machines, and nothing to act on there.
ROOT_WARNING = "You're running the worker with superuser privileges"


def quiet(env: Env) -> bool:
    """LOG_LEVEL WARNING or above: Celery's banners (its ASCII art, configuration and queues on
    stdout) and its warning about running as root stay off the console; log records of WARNING
    and above still show. Below (INFO, DEBUG), Celery says everything as it would."""
    return _LEVELS.get(_get(env, "LOG_LEVEL", "INFO").strip().upper(), 0) >= _LEVELS["WARNING"]


def _celery(env: Env, python: str) -> list[str]:
    """`python -m celery -A control_plane`, quiet where LOG_LEVEL asks (`quiet`)."""
    if not quiet(env):
        return [python, "-m", "celery", "-A", "control_plane"]
    return [python, "-W", f"ignore:{ROOT_WARNING}", "-m", "celery", "-A", "control_plane", "-q"]


def _worker(env: Env, python: str) -> list[str]:
    return [
        *_celery(env, python),
        "worker",
        "--hostname",
        worker_node_name(env),
        "--concurrency",
        _get(env, "WORKER_CONCURRENCY", "2"),
        "--loglevel",
        _get(env, "LOG_LEVEL", "INFO"),
    ]


def _beat(env: Env, python: str) -> list[str]:
    state = state_dir(env)
    return [
        *_celery(env, python),
        "beat",
        "--schedule",
        str(state / "celerybeat-schedule"),
        "--pidfile",
        str(state / "celerybeat.pid"),
        "--loglevel",
        _get(env, "LOG_LEVEL", "INFO"),
    ]


def _rules(env: Env, python: str) -> list[str]:
    argv = [python, MANAGE, "run_rules", "--live"]
    # Its /metrics answers once the Spark session and the streaming job are set up: the probe.
    argv += ["--metrics-port", _get(env, "RULES_METRICS_PORT", "9101")]
    argv += ["--metrics-host", _get(env, "BIND_HOST", "127.0.0.1")]
    if env.get("RULES_CHECKPOINT"):
        argv += ["--checkpoint", env["RULES_CHECKPOINT"]]
    return argv


def _billing(env: Env, python: str) -> list[str]:
    period = env.get("BILLING_PERIOD") or previous_month()
    return [python, MANAGE, "billing_report", "--period", period]


def _migrate(env: Env, python: str) -> list[str]:
    # Static files are collected when the image is built (the root filesystem is read-only at
    # run time); `make run` serves them from the apps. Migrating is the deploy-time step.
    return [python, MANAGE, "migrate", "--noinput"]


# --- health checks --------------------------------------------------------------------------


def _probe_http(env: Env, timeout: float) -> str:
    host = _connect_host(env)
    return _get_ok(f"http://{host}:{_get(env, 'WEB_PORT', '8000')}/healthz", timeout)


def _probe_rules(env: Env, timeout: float) -> str:
    host = _connect_host(env)
    return _get_ok(f"http://{host}:{_get(env, 'RULES_METRICS_PORT', '9101')}/metrics", timeout)


def _get_ok(url: str, timeout: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (loopback)
        body = response.read(200).decode(errors="replace")
        if response.status != 200:
            raise RuntimeError(f"{url} answered {response.status}")
    return f"{url}: {body.strip().splitlines()[0] if body.strip() else 'ok'}"


# MQTT 3.1.1 CONNECT, clean session, keep-alive 10 s, client id "healthcheck", no credentials.
_CONNECT = bytes([0x10, 23, 0, 4]) + b"MQTT" + bytes([4, 0x02, 0, 10, 0, 11]) + b"healthcheck"


def _probe_mqtt(env: Env, timeout: float) -> str:
    """A real MQTT exchange: any CONNACK (a refusal of the anonymous client included) shows
    the broker reads packets and answers them."""
    host, port = _connect_host(env), int(_get(env, "MQTT_PORT", "1883"))
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.sendall(_CONNECT)
        answer = b""
        while len(answer) < 4:
            chunk = sock.recv(4 - len(answer))
            if not chunk:
                break
            answer += chunk
    if len(answer) < 4 or answer[0] != 0x20:
        raise RuntimeError(f"mqtt://{host}:{port} did not answer CONNACK: {answer!r}")
    return f"mqtt://{host}:{port}: CONNACK return code {answer[3]:#04x}"


def _probe_celery_worker(env: Env, timeout: float) -> str:
    from celery import Celery

    node = worker_node_name(env)
    app = Celery(broker=_redis_url(env))
    try:
        replies = app.control.ping(destination=[node], timeout=timeout)
    finally:
        app.close()
    if not any(node in reply for reply in replies):
        raise RuntimeError(f"celery node {node} did not answer ping")
    return f"{node}: pong"


def _probe_celery_beat(env: Env, timeout: float) -> str:
    import redis

    pidfile = state_dir(env) / "celerybeat.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError) as error:
        raise RuntimeError(f"no beat pid file at {pidfile}: {error}") from error
    if not Path(f"/proc/{pid}").exists():
        raise RuntimeError(f"beat pid {pid} from {pidfile} is not running")
    # Beat is useful only while it can hand tasks to the broker.
    redis.Redis.from_url(_redis_url(env), socket_timeout=timeout).ping()
    return f"beat pid {pid} running; redis answers PING"


def _connect_host(env: Env) -> str:
    host = _get(env, "BIND_HOST", "127.0.0.1")
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def _redis_url(env: Env) -> str:
    url = env.get("REDIS_URL")
    if not url:
        raise RuntimeError("REDIS_URL is not set")
    return url


# --- the table -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Role:
    """One process of the platform."""

    name: str
    summary: str
    kind: str  # "service" runs until stopped; "job" runs to completion (exit 0 is healthy)
    build: Callable[[Env, str], list[str]] = field(repr=False)
    probe: Callable[[Env, float], str] | None = field(default=None, repr=False)
    ports: tuple[str, ...] = ()  # the environment variables naming the ports it listens on

    def command(self, env: Env | None = None, python: str | None = None) -> list[str]:
        return self.build(os.environ if env is None else env, python or sys.executable)

    def health(self, env: Env | None = None, timeout: float = 5.0) -> str:
        """Probe a running instance; raises with the reason when it is unhealthy."""
        if self.kind == "job":
            return f"{self.name} is a job: judged by its exit status, healthy while it runs"
        assert self.probe is not None
        return self.probe(os.environ if env is None else env, timeout)


ROLES: dict[str, Role] = {
    role.name: role
    for role in (
        Role(
            "web",
            "portal, REST API and live views (Daphne, ASGI)",
            "service",
            _web,
            _probe_http,
            ("WEB_PORT",),
        ),
        Role(
            "broker",
            "the MQTT broker (TCP, WebSocket)",
            "service",
            _broker,
            _probe_mqtt,
            ("MQTT_PORT", "MQTT_WS_PORT", "MQTT_TLS_PORT", "MQTT_WSS_PORT", "METRICS_PORT"),
        ),
        Role("worker", "Celery worker", "service", _worker, _probe_celery_worker),
        Role(
            "beat", "Celery beat (exactly one in the fleet)", "service", _beat, _probe_celery_beat
        ),
        Role(
            "rules",
            "the live rules job (Spark micro-batches over the live feed)",
            "service",
            _rules,
            _probe_rules,
            ("RULES_METRICS_PORT",),
        ),
        Role("billing", "the billing job for BILLING_PERIOD (Spark)", "job", _billing),
        Role("migrate", "database migrations (run before a new version starts)", "job", _migrate),
    )
}


def command(role: str, env: Env | None = None, python: str | None = None) -> list[str]:
    """The command line of ROLE under ENV (default: this process's environment)."""
    try:
        return ROLES[role].command(env, python)
    except KeyError:
        raise ValueError(f"unknown role {role!r}; roles: {', '.join(ROLES)}") from None


def data_plane_command(
    *,
    python: str | None = None,
    host: str = "127.0.0.1",
    port: int | str = 1883,
    ws_port: int | str = 8083,
    database_url: str | None = None,
    auth_file: str | os.PathLike[str] | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The broker process itself (`python -m data_plane`), without Django: what `runbroker`
    becomes, and what benchmarks and tests start on a static tenants file or a given database."""
    argv = [python or sys.executable, "-m", "data_plane", "--host", host]
    argv += ["--port", str(port), "--ws-port", str(ws_port)]
    if database_url:
        argv += ["--database-url", database_url]
    if auth_file:
        argv += ["--auth-file", str(auth_file)]
    return argv + list(extra)


def current_role(env: Env | None = None) -> str | None:
    """The role this container runs: `PLATFORM_ROLE`, else what `run` wrote down (a health
    check is a separate process that does not inherit the entrypoint's environment)."""
    env = os.environ if env is None else env
    if env.get("PLATFORM_ROLE"):
        return env["PLATFORM_ROLE"]
    try:
        return (state_dir(env) / "role").read_text().strip() or None
    except OSError:
        return None


def prepare(role: str, env: Env | None = None) -> None:
    """What a role needs before it starts: the state directory (beat's schedule and pid file)."""
    state_dir(os.environ if env is None else env).mkdir(parents=True, exist_ok=True)


def run(role: str, extra: Sequence[str] = (), env: Env | None = None) -> None:
    """Replace this process with ROLE's (signals from the supervisor then reach it directly)."""
    argv = command(role, env) + list(extra)
    prepare(role, env)
    (state_dir(os.environ if env is None else env) / "role").write_text(role + "\n")
    os.chdir(REPO_DIR)
    os.execv(argv[0], argv)


def manage(arguments: Sequence[str]) -> None:
    """Replace this process with `manage.py ARGUMENTS` (a one-off command in a role's image)."""
    os.chdir(REPO_DIR)
    os.execv(sys.executable, [sys.executable, MANAGE, *arguments])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m common.runtime.processes", description=__doc__)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--health", action="store_true", help="probe ROLE; exit 0 when healthy")
    group.add_argument("--print", action="store_true", help="print ROLE's command line")
    group.add_argument("--list", action="store_true", help="print the table as JSON")
    group.add_argument(
        "--manage", action="store_true", help="run `manage.py ROLE ARG…` (a one-off command)"
    )
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("role", nargs="?")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="appended to ROLE's command")
    options = parser.parse_args(argv)
    if options.list:
        table = {
            name: {"summary": r.summary, "kind": r.kind, "command": r.command(), "ports": r.ports}
            for name, r in ROLES.items()
        }
        print(json.dumps(table, indent=2))
        return 0
    if options.manage:
        if not options.role:
            parser.error("--manage needs a command: --manage COMMAND [ARG…]")
        manage([options.role, *options.args])
        return 0  # not reached: manage() replaces the process
    options.role = options.role or current_role()
    if options.role not in ROLES:
        parser.error(f"ROLE must be one of {', '.join(ROLES)} (got {options.role!r})")
    if options.print:
        print(shlex.join(command(options.role) + options.args))
        return 0
    if options.health:
        try:
            print(ROLES[options.role].health(timeout=options.timeout))
        except Exception as error:  # any failure is an unhealthy answer, said plainly
            print(f"unhealthy: {options.role}: {error}", file=sys.stderr)
            return 1
        return 0
    run(options.role, options.args)
    return 0  # not reached: run() replaces the process


if __name__ == "__main__":
    sys.exit(main())

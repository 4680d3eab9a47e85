"""`make run`: the whole platform in the foreground on its embedded defaults.

Checks every port first (a port taken is named, with who holds it and the variable that moves
it, and nothing is left running), migrates, seeds the demo tenant and device, then supervises
the web server (Daphne, ASGI), the MQTT broker (with `/metrics`), a Celery worker, beat and the
live rules job (`run_rules --live`, Spark). The "is up" banner comes once every listener
answers. Ctrl-C (or SIGTERM) stops everything it started — the embedded Postgres and Redis too,
when it was the one that started them — and exits 0, and so does a SIGINT or SIGTERM sent to the
`make` that runs it (or make killed); if one part dies, the others are stopped and the command
exits 1.

Ports: `WEB_PORT` (8000), `MQTT_PORT` (1883), `MQTT_WS_PORT` (8083), `MQTT_TLS_PORT`,
`MQTT_WSS_PORT` (off; need `MQTT_TLS_CERT`/`MQTT_TLS_KEY`), `METRICS_PORT` (9100),
`RULES_METRICS_PORT` (9101); the options below override them.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand
from django.db import connections

from common.runtime import embedded, port_check
from common.runtime import processes as process_table
from common.runtime.parent_watch import ParentWatch
from common.security import secrets
from tenants import demo

# variable, command-line option, default ("" = off unless set), what listens there
PORTS = (
    ("WEB_PORT", "http_port", "8000", "portal + REST API"),
    ("MQTT_PORT", "mqtt_port", "1883", "MQTT"),
    ("MQTT_WS_PORT", "ws_port", "8083", "MQTT over WebSocket"),
    ("MQTT_TLS_PORT", "tls_port", "", "MQTT over TLS"),
    ("MQTT_WSS_PORT", "wss_port", "", "MQTT over secure WebSocket"),
    ("METRICS_PORT", "metrics_port", "9100", "broker metrics"),
    ("RULES_METRICS_PORT", "rules_metrics_port", "9101", "rules job metrics"),
)
# Which role binds which port: the banner waits for each to answer.
LISTENERS = {
    "web": ("WEB_PORT",),
    "broker": ("MQTT_PORT", "MQTT_WS_PORT", "MQTT_TLS_PORT", "MQTT_WSS_PORT", "METRICS_PORT"),
    "rules": ("RULES_METRICS_PORT",),
}
STOP_GRACE = 20.0  # seconds each part gets to stop after SIGTERM before SIGKILL


def _demo_password() -> str:
    # Stable across runs so a device configured once keeps working.
    path = Path(embedded.DATA_DIR) / "demo-credentials.json"
    if path.exists():
        return json.loads(path.read_text())["password"]
    password = secrets.generate_secret()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"password": password}))
    path.chmod(0o600)
    return password


def _demo_login(tenant) -> tuple[str, str]:
    """The demo tenant's portal login (owner), stable across runs like the device's secret."""
    from tenants.people import services as people

    path = Path(embedded.DATA_DIR) / "demo-login.json"
    if path.exists():
        saved = json.loads(path.read_text())
    else:
        saved = {"email": "demo@example.com", "password": secrets.generate_secret()[:16]}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(saved))
        path.chmod(0o600)
    people.demo_login_ensure(tenant, email=saved["email"], password=saved["password"])
    return saved["email"], saved["password"]


class Stop(Exception):
    """Ctrl-C or SIGTERM arrived: stop what was started and exit 0."""


class Command(BaseCommand):
    help = "Run the portal/API, the MQTT broker and Celery together (the embedded default)."

    # The roles of the table of processes that `make run` supervises.
    roles = ("web", "broker", "worker", "beat", "rules")

    def add_arguments(self, parser):
        for variable, option, default, what in PORTS:
            parser.add_argument(
                "--" + option.replace("_", "-"),
                type=int,
                help=f"{what} (default: ${variable}, else {default or 'off'})",
            )
        parser.add_argument("--host", help="address to bind (default: $BIND_HOST, else 127.0.0.1)")
        parser.add_argument(
            "--startup-timeout",
            type=float,
            default=float(os.environ.get("STARTUP_TIMEOUT") or 600),
            help="seconds to wait for every listener before giving up (default 600)",
        )

    # -- the run ------------------------------------------------------------------------

    def handle(self, *args, **options):
        self._stopping = False
        self._processes: dict[str, subprocess.Popen] = {}
        # A SIGINT or SIGTERM sent to `make` alone (not through the terminal), or make killed:
        # stop as for Ctrl-C (common/runtime/parent_watch.py says why make does not tell us).
        self._make = ParentWatch()
        host = options["host"] or os.environ.get("BIND_HOST") or "127.0.0.1"
        ports, problems = self._ports(options)
        problems += [c.message() for c in port_check.check(host, ports)]
        problems += self._tls_problems(ports)
        if problems:
            for problem in problems:
                self.stderr.write(f"make run: {problem}")
            self.stderr.write("make run: nothing started.")
            self._stop_embedded()
            sys.exit(2)
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        exit_code = 0
        with self._own_terminal():
            try:
                exit_code = self._run(host, ports, options["startup_timeout"])
            except Stop:
                exit_code = 0
            finally:
                self._stop_processes()
                connections.close_all()
                self._stop_embedded()
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
        if exit_code:
            sys.exit(exit_code)

    def _run(self, host: str, ports: dict[str, int], startup_timeout: float) -> int:
        self._say("preparing the database (migrations, demo tenant)…")
        call_command("migrate", interactive=False, verbosity=0)
        password = _demo_password()
        tenant, device = demo.demo_seed(password=password)
        self._portal_login = _demo_login(tenant)  # a portal login for the demo tenant
        self._check_stop()

        env = dict(os.environ)
        pki = self._dev_pki(env, ports, tenant, device)
        env["DATABASE_URL"] = settings.DATABASE_URL
        env["REDIS_URL"] = os.environ.get("REDIS_URL") or embedded.redis_url()
        # The portal's live views use this broker; it tells devices where it is.
        env.setdefault("MQTT_INTERNAL_HOST", _connect_host(host))
        env.setdefault("MQTT_INTERNAL_PORT", str(ports["MQTT_PORT"]))
        env.setdefault("MQTT_PUBLIC_HOST", _connect_host(host))
        env.setdefault("MQTT_PUBLIC_PORT", str(ports["MQTT_PORT"]))
        env.setdefault(
            "MQTT_PUBLIC_WS_URL", f"ws://{_connect_host(host)}:{ports['MQTT_WS_PORT']}/mqtt"
        )
        if "MQTT_TLS_PORT" in ports:  # the portal shows it (mqtts://), with the CA to trust
            env.setdefault("MQTT_PUBLIC_TLS_PORT", str(ports["MQTT_TLS_PORT"]))
            if pki is not None:
                env.setdefault("MQTT_PUBLIC_CA_FILE", str(pki.ca))
        # The command lines come from the table of processes (common/runtime/processes.py), the same
        # one the container entrypoint, compose and Terraform use; only the ports are ours.
        for variable, _option, _default, _what in PORTS:
            env.pop(variable, None)
        env.update({variable: str(port) for variable, port in ports.items()})
        env.update(
            BIND_HOST=host,
            LOG_LEVEL=os.environ.get("LOG_LEVEL", "WARNING"),
            WORKER_CONCURRENCY=os.environ.get("WORKER_CONCURRENCY", "1"),
            PLATFORM_STATE_DIR=os.environ.get("PLATFORM_STATE_DIR") or str(embedded.DATA_DIR),
        )
        self._check_stop()
        self._say(f"starting {', '.join(self.roles)}; waiting for their listeners…")
        for role in self.roles:
            process_table.prepare(role, env)
            # Each part in its own process group: Ctrl-C reaches this supervisor alone, which
            # stops every part (and whatever the part started: Spark's JVM) in order.
            self._processes[role] = subprocess.Popen(
                process_table.command(role, env),
                cwd=settings.BASE_DIR,
                env=env,
                start_new_session=True,
            )
        failed = self._wait_for_listeners(host, ports, startup_timeout)
        if failed:
            return 1
        self._print_banner(host, ports, tenant.slug, device.username, password)
        if pki is not None and "MQTT_TLS_PORT" in ports:
            at, port = _connect_host(host), ports["MQTT_TLS_PORT"]
            self.stdout.write(
                f"  development CA              {pki.ca}\n"
                f"  try (certificate): mosquitto_pub -h {at} -p {port} --cafile {pki.ca}"
                f" --cert {pki.device_cert} --key {pki.device_key} -i {device.name}"
                " -t demo/tls -m hello\n"
            )
            self.stdout.flush()
        while True:
            self._check_stop()
            for name, process in self._processes.items():
                if process.poll() is not None:
                    self.stderr.write(
                        f"make run: {name} exited with {process.returncode}; stopping everything."
                    )
                    return 1
            time.sleep(0.5)

    # -- ports --------------------------------------------------------------------------

    def _ports(self, options) -> tuple[dict[str, int], list[str]]:
        """The ports chosen (variable → port), and what is wrong with the values given."""
        chosen, problems = {}, []
        for variable, option, default, _what in PORTS:
            value = options.get(option)
            if value is None:
                raw = os.environ.get(variable, "").strip() or default
                if not raw:
                    continue
                try:
                    value = int(raw)
                except ValueError:
                    problems.append(f"{variable}={raw!r} is not a port number.")
                    continue
            if not 0 < value < 65536:
                problems.append(f"{variable}={value} is not a port (1-65535).")
                continue
            chosen[variable] = value
        return chosen, problems

    def _tls_problems(self, ports: dict[str, int]) -> list[str]:
        # Neither given: a development CA is made (`_dev_pki`); one without the other is a slip.
        wanted = [v for v in ("MQTT_TLS_PORT", "MQTT_WSS_PORT") if v in ports]
        given = [v for v in ("MQTT_TLS_CERT", "MQTT_TLS_KEY") if os.environ.get(v)]
        if wanted and len(given) == 1:
            return [f"{' and '.join(wanted)} need both MQTT_TLS_CERT and MQTT_TLS_KEY (PEM files)."]
        return []

    @staticmethod
    def _dev_pki(env: dict, ports: dict[str, int], tenant, device):
        """A TLS port without a certificate of one's own: a development CA
        (control_plane/dev_pki.py) for the server and the demo device, registered for the demo
        tenant so the device connects with its certificate."""
        wanted = "MQTT_TLS_PORT" in ports or "MQTT_WSS_PORT" in ports
        if not wanted or env.get("MQTT_TLS_CERT"):
            return None
        from control_plane import dev_pki
        from tenants.devices import identity
        from tenants.devices import selectors as device_selectors

        pki = dev_pki.ensure(Path(embedded.DATA_DIR) / "dev-pki", device.name)
        env["MQTT_TLS_CERT"], env["MQTT_TLS_KEY"] = str(pki.server_cert), str(pki.server_key)
        pem = pki.ca.read_text()
        if not device_selectors.ca_registered(tenant=tenant, pem=pem):
            identity.ca_register(
                tenant=tenant,
                name=device_selectors.ca_name_free(tenant=tenant, name="dev-ca"),
                pem=pem,
                verification_pem=dev_pki.verification(pki, identity.registration_code(tenant)),
            )
        return pki

    def _wait_for_listeners(self, host: str, ports: dict[str, int], timeout: float) -> bool:
        """Wait until every listener answers; True (after saying why) when it never will."""
        connect = _connect_host(host)
        waiting = {
            (role, variable): ports[variable]
            for role, variables in LISTENERS.items()
            for variable in variables
            if variable in ports
        }
        started = time.monotonic()
        next_note = started + 15
        while waiting:
            self._check_stop()
            for role, process in self._processes.items():
                if process.poll() is not None:
                    self.stderr.write(
                        f"make run: {role} exited with {process.returncode} while starting; "
                        "stopping everything."
                    )
                    return True
            for key, port in list(waiting.items()):
                if _answers(connect, port):
                    del waiting[key]
            now = time.monotonic()
            if waiting and now > started + timeout:
                missing = ", ".join(f"{r} ({v}={p})" for (r, v), p in waiting.items())
                self.stderr.write(f"make run: not listening after {timeout:.0f} s: {missing}.")
                return True
            if waiting and now > next_note:
                next_note = now + 15
                missing = ", ".join(sorted({role for role, _ in waiting}))
                self._say(f"still starting: {missing} ({now - started:.0f} s)…")
            time.sleep(0.2)
        return False

    # -- stopping -----------------------------------------------------------------------

    def _on_signal(self, signum, frame) -> None:
        if not self._stopping:
            self._stopping = True
            self._say("stopping…")

    def _check_stop(self) -> None:
        if not self._stopping and (why := self._make.stopping()):
            self._stopping = True
            self._say(f"{why}: stopping…")
        if self._stopping:
            raise Stop

    def _stop_processes(self) -> None:
        running = {n: p for n, p in self._processes.items() if p.poll() is None}
        for process in running.values():
            # The part alone, as a container runtime does: it stops its own children in order
            # (the rules job its Spark JVM); what is left of its group is killed after.
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for name, process in running.items():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.stderr.write(
                    f"make run: {name} did not stop within {STOP_GRACE:.0f} s: killed"
                )
        for process in self._processes.values():
            _signal_group(process, signal.SIGKILL)  # stragglers of a group (a JVM, a pool)
            process.wait()

    def _stop_embedded(self) -> None:
        """Stop the embedded services this process started; say so of those it found running."""
        for name, env_var, stop in (
            ("Redis", "REDIS_URL", embedded.stop_redis),
            ("Postgres", "DATABASE_URL", embedded.stop_postgres),
        ):
            if name.lower() in embedded.STARTED:
                stop()
                embedded.STARTED.discard(name.lower())
                self._say(f"stopped the embedded {name} it had started.")
            elif not os.environ.get(env_var) and self._used_embedded(name):
                self._say(f"left the embedded {name} running: it was running before make run.")

    def _used_embedded(self, name: str) -> bool:
        if name == "Postgres":
            return True  # settings resolved DATABASE_URL from it
        return bool(self._processes)  # Redis is looked up only once the parts start

    @contextlib.contextmanager
    def _own_terminal(self) -> Iterator[None]:
        """Under `make run` in a terminal, take the terminal's foreground: Ctrl-C then reaches
        this command alone (which stops everything and exits 0), not make, which would
        otherwise die of the signal and report an error."""
        fd = sys.stdin.fileno() if sys.stdin and sys.stdin.isatty() else None
        if fd is None or os.tcgetpgrp(fd) != os.getpgrp() or os.getpgrp() == os.getpid():
            yield
            return
        parent_group = os.getpgrp()
        ttou = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        try:
            os.setpgid(0, 0)
            os.tcsetpgrp(fd, os.getpgrp())
        except OSError:
            signal.signal(signal.SIGTTOU, ttou)
            yield
            return
        # Ctrl-Z would stop this supervisor alone (the shell waits on make, not on us): the
        # terminal would seem to hang. Ctrl-C is the way out.
        tstp = signal.signal(signal.SIGTSTP, signal.SIG_IGN)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                os.tcsetpgrp(fd, parent_group)
            signal.signal(signal.SIGTTOU, ttou)
            signal.signal(signal.SIGTSTP, tstp)

    # -- output -------------------------------------------------------------------------

    def _say(self, text: str) -> None:
        self.stdout.write(f"make run: {text}")
        self.stdout.flush()

    def _print_banner(self, host, ports, tenant, username, password) -> None:
        at = _connect_host(host)
        lines = ["", "MQTT platform is up (Ctrl-C stops everything):"]
        addresses = {
            "WEB_PORT": f"http://{at}:{ports['WEB_PORT']}/   (API docs: /api/docs/)",
            "MQTT_PORT": f"mqtt://{at}:{ports['MQTT_PORT']}",
            "MQTT_WS_PORT": f"ws://{at}:{ports['MQTT_WS_PORT']}/mqtt",
            "MQTT_TLS_PORT": f"mqtts://{at}:{ports.get('MQTT_TLS_PORT')}",
            "MQTT_WSS_PORT": f"wss://{at}:{ports.get('MQTT_WSS_PORT')}/mqtt",
            "METRICS_PORT": f"http://{at}:{ports.get('METRICS_PORT')}/metrics",
            "RULES_METRICS_PORT": f"http://{at}:{ports.get('RULES_METRICS_PORT')}/metrics",
        }
        for variable, _option, _default, what in PORTS:
            if variable in ports:
                lines.append(f"  {what:<27} {addresses[variable]}")
        lines += [
            f"  demo tenant                 {tenant}",
            f"  demo device                 username {username}",
            f"                              password {password}",
            "  demo portal login           {} / {}".format(*self._portal_login),
            f"  try: mosquitto_sub -h {at} -p {ports['MQTT_PORT']} -u '{username}' "
            f"-P '{password}' -t 'demo/#' -v",
            "  ports: " + " ".join(f"{v}={p}" for v, p in ports.items()),
            "  (move one with `make run VARIABLE=PORT`; see docs/guides/operating.md)",
            "",
        ]
        self.stdout.write("\n".join(lines))
        self.stdout.flush()


def _connect_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def _answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signum)

"""`make run`: the whole platform in the foreground on its embedded defaults.

Migrates, seeds the demo tenant and device, then supervises the web server (Daphne, ASGI), the
MQTT broker, a Celery worker with beat and the live rules job (`run_rules --live`, Spark). Ctrl-C
(or SIGTERM) stops everything it started; if one part dies, the others are stopped too and the
command exits non-zero.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from common import processes as process_table
from control_plane import embedded
from tenants import secrets, services


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


class Command(BaseCommand):
    help = "Run the portal/API, the MQTT broker and Celery together (the embedded default)."

    # The roles of the table of processes that `make run` supervises.
    roles = ("web", "broker", "worker", "beat", "rules")

    def add_arguments(self, parser):
        parser.add_argument("--http-port", type=int, default=8000)
        parser.add_argument("--mqtt-port", type=int, default=1883)
        parser.add_argument("--ws-port", type=int, default=8083)
        parser.add_argument("--host", default="127.0.0.1")

    def handle(self, *args, http_port, mqtt_port, ws_port, host, **options):
        call_command("migrate", interactive=False, verbosity=0)
        password = _demo_password()
        tenant, device = services.demo_seed(password=password)

        env = dict(os.environ)
        pki = self._dev_pki(env, tenant, device)
        env["DATABASE_URL"] = settings.DATABASE_URL
        env["REDIS_URL"] = os.environ.get("REDIS_URL") or embedded.redis_url()
        env.setdefault("MQTT_INTERNAL_HOST", host)  # the portal's live views use this broker
        env.setdefault("MQTT_INTERNAL_PORT", str(mqtt_port))
        # The command lines come from the table of processes (common/processes.py), the same
        # one the container entrypoint, compose and Terraform use; only the ports are ours.
        env.update(
            BIND_HOST=host,
            WEB_PORT=str(http_port),
            MQTT_PORT=str(mqtt_port),
            MQTT_WS_PORT=str(ws_port),
            LOG_LEVEL=os.environ.get("LOG_LEVEL", "WARNING"),
            WORKER_CONCURRENCY=os.environ.get("WORKER_CONCURRENCY", "1"),
            PLATFORM_STATE_DIR=os.environ.get("PLATFORM_STATE_DIR") or str(embedded.DATA_DIR),
        )
        parts = {role: process_table.command(role, env) for role in self.roles}
        for role in self.roles:
            process_table.prepare(role, env)
        processes = {
            name: subprocess.Popen(cmd, cwd=settings.BASE_DIR, env=env)
            for name, cmd in parts.items()
        }
        self._print_banner(
            host, http_port, mqtt_port, ws_port, tenant.slug, device.username, password
        )
        if pki is not None:
            port = env["MQTT_TLS_PORT"]
            self.stdout.write(
                f"  MQTT over TLS       mqtts://{host}:{port} (development CA: {pki.ca})\n"
                f"  try (certificate):  mosquitto_pub -h {host} -p {port} --cafile {pki.ca}"
                f" --cert {pki.device_cert} --key {pki.device_key} -i {device.name}"
                " -t demo/tls -m hello\n"
            )
            self.stdout.flush()
        stopping = False

        def stop(*_):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGTERM, stop)
        exit_code = 0
        try:
            while not stopping:
                for name, process in processes.items():
                    if process.poll() is not None:
                        self.stderr.write(f"{name} exited with {process.returncode}; stopping.")
                        exit_code = 1
                        stopping = True
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
        finally:
            for process in processes.values():
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            for process in processes.values():
                try:
                    process.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    process.kill()
        if exit_code:
            sys.exit(exit_code)

    @staticmethod
    def _dev_pki(env: dict, tenant, device):
        """`make run MQTT_TLS_PORT=8883` without a certificate of one's own: a development CA
        (control_plane/dev_pki.py) for the server and the demo device, registered for the demo
        tenant so the device connects with its certificate."""
        if not env.get("MQTT_TLS_PORT") or env.get("MQTT_TLS_CERT"):
            return None
        from control_plane import dev_pki
        from tenants import identity
        from tenants.models import CaCertificate

        pki = dev_pki.ensure(Path(embedded.DATA_DIR) / "dev-pki", device.name)
        env["MQTT_TLS_CERT"], env["MQTT_TLS_KEY"] = str(pki.server_cert), str(pki.server_key)
        pem = pki.ca.read_text()
        if not CaCertificate.objects.filter(tenant=tenant, pem=pem, revoked_at=None).exists():
            name = "dev-ca"
            if CaCertificate.objects.filter(tenant=tenant, name=name).exists():
                name = f"dev-ca-{CaCertificate.objects.filter(tenant=tenant).count()}"
            identity.ca_register(
                tenant=tenant,
                name=name,
                pem=pem,
                verification_pem=dev_pki.verification(pki, identity.registration_code(tenant)),
            )
        return pki

    def _print_banner(self, host, http_port, mqtt_port, ws_port, tenant, username, password):
        self.stdout.write(
            "\n".join(
                [
                    "",
                    "MQTT platform is up (Ctrl-C stops everything):",
                    f"  portal + REST API   http://{host}:{http_port}/   (docs: /api/docs/)",
                    f"  MQTT                mqtt://{host}:{mqtt_port}",
                    f"  MQTT over WebSocket ws://{host}:{ws_port}/mqtt",
                    f"  demo tenant         {tenant}",
                    f"  demo device         username {username}",
                    f"                      password {password}",
                    f"  try: mosquitto_sub -h {host} -p {mqtt_port} -u '{username}' -P '{password}'"
                    " -t 'demo/#' -v",
                    "",
                ]
            )
        )
        self.stdout.flush()

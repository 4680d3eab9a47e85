"""`python manage.py runbroker`: the MQTT broker alone, on the configured database."""

import os
import sys

from django.conf import settings
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Run the MQTT broker (TCP, WebSocket, optional TLS) against the configured database."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=1883)
        parser.add_argument("--ws-port", type=int, default=8083)
        parser.add_argument(
            "--workers",
            type=int,
            default=1,
            help="broker processes (each needs its own ports until clustering)",
        )
        parser.add_argument("--metrics-port", type=int)
        parser.add_argument(
            "--no-archive",
            action="store_true",
            help="do not archive messages to the object store (the rules and history see nothing)",
        )

    def handle(self, *args, host, port, ws_port, workers, metrics_port, no_archive, **options):
        argv = [
            sys.executable,
            "-m",
            "data_plane",
            "--host",
            host,
            "--port",
            str(port),
            "--ws-port",
            str(ws_port),
            "--database-url",
            settings.DATABASE_URL,
            "--log-level",
            os.environ.get("LOG_LEVEL", "INFO"),
        ]
        if metrics_port:
            argv += ["--metrics-port", str(metrics_port)]
        if no_archive:
            argv.append("--no-archive")
        if workers != 1:
            self.stderr.write("--workers > 1 needs the cluster bus; running one worker.")
        # The broker has no Django on its hot path: it replaces this process, so signals
        # (Ctrl-C, SIGTERM from a supervisor) reach it directly.
        os.chdir(settings.BASE_DIR)
        os.execv(sys.executable, argv)

"""`python manage.py runbroker`: the MQTT broker alone, on the configured database."""

import os
import sys

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from common.runtime import embedded
from common.runtime.processes import data_plane_command, supervise


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
            help="broker processes sharing the ports (SO_REUSEPORT), each a node of the cluster "
            "on REDIS_URL (the embedded Redis when unset); /metrics on --metrics-port + i",
        )
        parser.add_argument("--tls-port", type=int, help="MQTT over TLS (MQTT_TLS_CERT/KEY)")
        parser.add_argument("--wss-port", type=int, help="secure WebSocket (MQTT_TLS_CERT/KEY)")
        parser.add_argument("--metrics-port", type=int)
        parser.add_argument(
            "--no-archive",
            action="store_true",
            help="do not archive messages to the object store (the rules and history see nothing)",
        )
        parser.add_argument(
            "--no-journey",
            action="store_true",
            help="record no journey (each publish's outcome, each client's events)",
        )
        parser.add_argument(
            "--journey-interval",
            type=float,
            help="seconds per journey segment (default 2): how soon an outcome can be found",
        )

    def handle(
        self,
        *args,
        host,
        port,
        ws_port,
        workers,
        tls_port,
        wss_port,
        metrics_port,
        no_archive,
        no_journey,
        journey_interval=None,
        **options,
    ):
        extra = ["--log-level", os.environ.get("LOG_LEVEL", "INFO")]
        for flag, value in (
            ("--tls-port", tls_port),
            ("--wss-port", wss_port),
            ("--metrics-port", metrics_port),
        ):
            if value:
                extra += [flag, str(value)]
        if no_archive:
            extra.append("--no-archive")
        if no_journey:
            extra.append("--no-journey")
        if journey_interval:
            extra += ["--journey-interval", str(journey_interval)]
        os.chdir(settings.BASE_DIR)
        if workers > 1:
            sys.exit(self.workers(workers, host, port, ws_port, metrics_port, extra))
        argv = data_plane_command(
            host=host,
            port=port,
            ws_port=ws_port,
            database_url=settings.DATABASE_URL,
            extra=extra,
        )
        # The broker has no Django on its hot path: it replaces this process, so signals
        # (Ctrl-C, SIGTERM from a supervisor) reach it directly.
        os.execv(sys.executable, argv)

    def workers(self, count, host, port, ws_port, metrics_port, extra) -> int:
        """N broker processes on the same ports, each a node of one cluster on Redis."""
        if not port or not ws_port:
            raise CommandError("--workers needs fixed ports (0 would give each its own)")
        redis_url = os.environ.get("REDIS_URL") or embedded.redis_url()
        extra = list(extra)
        if metrics_port:  # each worker its own /metrics: the port, the port + 1, ...
            i = extra.index("--metrics-port")
            del extra[i : i + 2]
        commands = []
        for index in range(count):
            # Its slot: a worker the supervisor restarts is home to the same tenants (tenant-
            # affine workers, data_plane.cluster.affinity).
            own = ["--reuse-port", "--redis-url", redis_url, "--worker-slot", str(index)]
            if metrics_port:
                own += ["--metrics-port", str(metrics_port + index)]
            commands.append(
                data_plane_command(
                    host=host,
                    port=port,
                    ws_port=ws_port,
                    database_url=settings.DATABASE_URL,
                    extra=[*extra, *own],
                )
            )
        return supervise(commands)

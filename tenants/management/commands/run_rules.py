"""`manage.py run_rules`: tenants' rules on Spark, in the foreground.

- `run_rules [--tenant T] [--rule R] [--from ISO --to ISO]`: a backfill over the archive (default
  range: the last 24 hours), progress on stderr, a JSON summary on stdout.
- `run_rules --live [--metrics-port P] [--checkpoint DIR]`: the live job (one Structured Streaming
  query for every tenant's enabled rules) until Ctrl-C or SIGTERM.

The jobs (`spark/`) do not import Django: they get the database this command resolves (the
configured `DATABASE_URL`, or the embedded cluster, started if needed) as a libpq connection string,
and the object store of `OBJECT_STORE_URL`.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from datetime import UTC, datetime, timedelta

from django.core.management.base import BaseCommand, CommandError


def database_url() -> str:
    """The database Django is using (the configured or embedded one; a test run's test
    database), as a libpq connection string for the jobs' psycopg."""
    from django.db import connection
    from psycopg.conninfo import make_conninfo

    db = connection.settings_dict
    params = {
        "host": db.get("HOST") or None,
        "port": str(db["PORT"]) if db.get("PORT") else None,
        "dbname": db.get("NAME"),
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
    }
    return make_conninfo(**{k: v for k, v in params.items() if v is not None})


class Command(BaseCommand):
    help = "Run tenants' rules: a backfill over the archive, or the live job (--live)."

    def add_arguments(self, parser):
        parser.add_argument("--live", action="store_true", help="run the live job until stopped")
        parser.add_argument("--tenant", help="backfill only this tenant's rules")
        parser.add_argument("--rule", help="backfill only the rule of this name")
        parser.add_argument("--from", dest="start", help="ISO 8601 start (inclusive), UTC")
        parser.add_argument("--to", dest="end", help="ISO 8601 end (exclusive), UTC")
        parser.add_argument("--metrics-port", type=int, help="live: serve /metrics on this port")
        parser.add_argument("--metrics-host", default="127.0.0.1")
        parser.add_argument("--checkpoint", help="live: checkpoint folder")
        parser.add_argument("--trigger", type=float, default=1.0, help="live: seconds per batch")
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args, **options):
        from common.object_store import open_object_store

        store = open_object_store()
        if options["live"]:
            if options["tenant"] or options["rule"] or options["start"] or options["end"]:
                raise CommandError(
                    "--live serves every enabled rule: no --tenant/--rule/--from/--to"
                )
            return self._live(store, options)
        return self._backfill(store, options)

    def _backfill(self, store, options):
        from spark.archive import iso_to_ms
        from spark.rules.backfill import NoRules, run_backfill
        from spark.session import build_session

        now = datetime.now(UTC)
        try:
            end = iso_to_ms(options["end"]) if options["end"] else int(now.timestamp() * 1000)
            start = (
                iso_to_ms(options["start"])
                if options["start"]
                else int((now - timedelta(days=1)).timestamp() * 1000)
            )
        except ValueError as exc:
            raise CommandError(f"--from/--to must be ISO 8601 instants: {exc}") from None
        if start >= end:
            raise CommandError("--from must be before --to")
        if options["rule"] and not options["tenant"]:
            raise CommandError("--rule needs --tenant (rule names are per tenant)")
        show = not options["no_progress"]
        started = time.monotonic()

        def progress(p):
            if not show:
                return
            width = 30
            done = int(width * p.chunk / max(p.chunks, 1))
            bar = "#" * done + "." * (width - done)
            sys.stderr.write(
                f"\r[{bar}] {p.chunk}/{p.chunks} chunks  {p.rows_read} rows  "
                f"{p.summary.passed} passed  {p.summary.failed} failed  "
                f"{time.monotonic() - started:.1f}s"
            )
            sys.stderr.flush()

        from pyspark.sql import SparkSession

        owned = SparkSession.getActiveSession() is None  # (a caller's session is left running)
        spark = build_session("rules-backfill")
        try:
            summary = run_backfill(
                spark,
                database_url(),
                store,
                start,
                end,
                tenant=options["tenant"],
                rule=options["rule"],
                progress=progress,
            )
        except NoRules as exc:
            raise CommandError(str(exc)) from None
        finally:
            if show:
                sys.stderr.write("\n")
            if owned:
                spark.stop()
        summary["from"] = datetime.fromtimestamp(start / 1000, UTC).isoformat()
        summary["to"] = datetime.fromtimestamp(end / 1000, UTC).isoformat()
        self.stdout.write(json.dumps(summary, indent=2))

    def _live(self, store, options):
        import logging

        from spark.rules.live import DEFAULT_CHECKPOINT, LiveJob, serve_metrics
        from spark.session import build_session

        logging.basicConfig(
            level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
        )
        # -v 2 and up: every batch's timing (what the live latency is made of).
        level = {0: logging.WARNING, 1: logging.INFO}.get(options["verbosity"], logging.DEBUG)
        logging.getLogger("spark.rules").setLevel(level)
        spark = build_session("rules-live")
        job = LiveJob(
            spark,
            database_url(),
            store,
            checkpoint=options["checkpoint"] or DEFAULT_CHECKPOINT,
            trigger_seconds=options["trigger"],
        )
        if options["metrics_port"]:
            serve_metrics(job.metrics, options["metrics_port"], options["metrics_host"])

        def stop(*_):
            job._stop.set()

        signal.signal(signal.SIGTERM, stop)
        job.start()
        sys.stderr.write(f"live rules job running (store {store.url}); Ctrl-C stops it\n")
        try:
            job.run_until_stopped()
        except KeyboardInterrupt:
            pass
        finally:
            try:
                job.stop()
                spark.stop()
            except Exception as exc:  # Ctrl-C reached the JVM too: it may already be gone
                sys.stderr.write(f"stopping: {exc}\n")
        sys.stderr.write(
            f"live rules job stopped after {job.batches} batches: "
            f"{job.total.matched} matched, {job.total.actions_ok} actions ok, "
            f"{job.total.actions_failed} failed\n"
        )

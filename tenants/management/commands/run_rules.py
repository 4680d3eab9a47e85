"""`manage.py run_rules`: tenants' rules on Spark, in the foreground.

- `run_rules [--tenant T] [--rule R] [--from ISO --to ISO]`: a backfill over the archive (default
  range: the last 24 hours), progress on stderr, a JSON summary on stdout. `--action N` (with
  `--rule`) fires only the rule's action N (from 1): a re-send of the range to one sink.
- `run_rules --live [--metrics-port P] [--checkpoint DIR]`: the live job (one Structured Streaming
  query for every tenant's enabled rules) until Ctrl-C or SIGTERM.

The jobs (`spark/`) do not import Django: they get the database this command resolves (the
configured `DATABASE_URL`, or the embedded cluster, started if needed) as a libpq connection string,
and the object store of `OBJECT_STORE_URL`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from datetime import UTC, datetime, timedelta

from django.core.management.base import BaseCommand, CommandError

from tenants.job_database import database_url


class Command(BaseCommand):
    help = "Run tenants' rules: a backfill over the archive, or the live job (--live)."

    def add_arguments(self, parser):
        parser.add_argument("--live", action="store_true", help="run the live job until stopped")
        parser.add_argument("--tenant", help="backfill only this tenant's rules")
        parser.add_argument("--rule", help="backfill only the rule of this name")
        parser.add_argument("--from", dest="start", help="ISO 8601 start (inclusive), UTC")
        parser.add_argument("--to", dest="end", help="ISO 8601 end (exclusive), UTC")
        parser.add_argument(
            "--actions",
            choices=["all", "new-only", "none"],
            default="all",
            help="which actions fire: all (the default), new-only (none already done for the "
            "same message and rule version), none (outputs counted only)",
        )
        parser.add_argument(
            "--action",
            type=int,
            help="with --rule: fire only this action of the rule (from 1), e.g. a sink to "
            "re-send the range to (with --actions new-only: what it has not had)",
        )
        parser.add_argument("--metrics-port", type=int, help="live: serve /metrics on this port")
        parser.add_argument("--metrics-host", default="127.0.0.1")
        parser.add_argument("--checkpoint", help="live: checkpoint folder")
        parser.add_argument(
            "--trigger",
            type=float,
            default=1.0,
            help="live, reading the archive's segments: seconds per batch",
        )
        parser.add_argument(
            "--feed",
            default=os.environ.get("RULES_FEED_URL") or os.environ.get("REDIS_URL"),
            help="live: the Redis of the brokers' live feed (default RULES_FEED_URL, then "
            "REDIS_URL); without one the job reads the archive's live segments (seconds behind)",
        )
        parser.add_argument(
            "--feed-key",
            default=os.environ.get("RULES_FEED_KEY", "rules:live"),
            help="live: the live feed's stream (the brokers' RULES_FEED_KEY)",
        )
        parser.add_argument("--no-progress", action="store_true")

    def handle(self, *args, **options):
        from common.stores.object_store import open_object_store

        store = open_object_store()
        if options["live"]:
            if (
                options["tenant"]
                or options["rule"]
                or options["start"]
                or options["end"]
                or options["action"] is not None
            ):
                raise CommandError(
                    "--live serves every enabled rule: no --tenant/--rule/--from/--to/--action"
                )
            return self._live(store, options)
        return self._backfill(store, options)

    def _backfill(self, store, options):
        from spark.archive import iso_to_ms
        from spark.rules.backfill import NoRules
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
        if options["action"] is not None and not options["rule"]:
            raise CommandError("--action needs --rule (an action is one rule's, from 1)")
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

        from spark.cluster.emr_serverless import EMR_SERVERLESS, spark_runner

        run = self._run_record(options, start, end)  # one named rule: a run its tenant sees
        if spark_runner() == EMR_SERVERLESS:  # submitted to the cluster, followed from here
            try:
                if run is not None:
                    summary = self._run(run, None, store, progress)
                else:
                    summary = self._on_cluster(store, options, start, end, progress)
            finally:
                if show:
                    sys.stderr.write("\n")
            summary["from"] = datetime.fromtimestamp(start / 1000, UTC).isoformat()
            summary["to"] = datetime.fromtimestamp(end / 1000, UTC).isoformat()
            self.stdout.write(json.dumps(summary, indent=2))
            return

        from pyspark.sql import SparkSession

        from tenants.rules.runs.execute import over_history

        owned = SparkSession.getActiveSession() is None  # (a caller's session is left running)
        spark = build_session("rules-backfill")
        try:
            if run is not None:
                summary = self._run(run, spark, store, progress)
            else:
                summary = over_history(
                    spark,
                    store,
                    start,
                    end,
                    tenant=options["tenant"],
                    rule=options["rule"],
                    actions=options["actions"],
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

    def _run_record(self, options, start: int, end: int):
        """With --tenant and --rule, the backfill is a RuleRun of that rule (the tenant sees it
        with its runs), executed here by the same code as the tenants' runs; else None."""
        if not (options["tenant"] and options["rule"]):
            return None
        from django.core.exceptions import ValidationError

        from tenants.models import Rule
        from tenants.rules.runs import services as runs

        rule = (
            Rule.objects.select_related("tenant")
            .filter(tenant__slug=options["tenant"], name=options["rule"])
            .first()
        )
        if rule is None:
            raise CommandError(f"no matching rules for tenant {options['tenant']!r}")
        try:
            return runs.run_start(
                rule=rule,
                start=datetime.fromtimestamp(start / 1000, UTC),
                end=datetime.fromtimestamp(end / 1000, UTC),
                actions=options["actions"],
                requested_by="operator (manage.py run_rules)",
                dispatch_now=False,
                operator=True,
                only_action=options["action"],
            )
        except ValidationError as exc:
            raise CommandError("; ".join(exc.messages)) from None

    def _on_cluster(self, store, options, start: int, end: int, progress) -> dict:
        """A backfill that is no RuleRun, on the Spark cluster: submitted, then followed (its
        progress, its result) until it ends; Ctrl-C cancels the job run."""
        from spark.cluster.emr_serverless import cluster_runner, failure_words, wait_for_job
        from spark.entry import reports
        from tenants.rules.runs.cluster import ENTRY_POINT, backfill_arguments, step_of

        key = reports.stamped("backfill")
        report = reports.report_folder("rules", key)
        runner = cluster_runner()
        job = runner.submit(
            ENTRY_POINT,
            backfill_arguments(
                start_ms=start,
                end_ms=end,
                report=report,
                store_url=store.url,
                tenant=options["tenant"],
                rule=options["rule"],
                actions=options["actions"],
            ),
            name=f"rules-{key}",
            client_token=key,
        )
        sys.stderr.write(f"submitted to EMR Serverless: job run {job} (report {report})\n")
        try:
            state, result = wait_for_job(
                runner, job, store, report, progress=lambda f: progress(step_of(f))
            )
        except KeyboardInterrupt:
            runner.cancel(job)
            raise CommandError(f"interrupted: job run {job} cancelled") from None
        reports.remove(store, report)  # the job ended, its result is read
        if result is not None and result.get("summary") is not None:
            summary = dict(result["summary"])
            summary["job_run"] = job
            return summary
        if result is not None and result.get("error"):
            raise CommandError(f"job run {job} failed: {result.get('why') or result['error']}")
        raise CommandError(
            f"job run {job} ended {state.emr_state}: {state.details or failure_words(state)}"
        )

    def _run(self, run, spark, store, progress) -> dict:
        from tenants.rules.runs.execute import execute

        ended, summary = execute(run.id, spark=spark, store=store, progress=progress)
        if summary is None:
            raise CommandError(
                f"the run {run.id} {getattr(ended, 'state', 'ended')}: "
                f"{getattr(ended, 'error', '')}"
            )
        summary["run"] = str(run.id)
        summary["state"] = ended.state if ended is not None else "gone"
        return summary

    def _live(self, store, options):
        import logging

        from spark.rules.feed import FeedReader
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
            feed=FeedReader(options["feed"], options["feed_key"]) if options["feed"] else None,
        )

        def stop(*_):
            job._stop.set()

        # Ctrl-C stops it as SIGTERM does: the loop sees the flag within half a second. Left to
        # raise KeyboardInterrupt, it lands inside py4j's call, which pyspark 4.0 turns into a
        # Py4JError: the job would exit with a traceback and status 1.
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        job.start()
        # /metrics answers once the job serves (its plans warmed, its place in the feed read):
        # the health probe `make run` and the containers wait for.
        if options["metrics_port"]:
            serve_metrics(job.metrics, options["metrics_port"], options["metrics_host"])
        source = f"live feed {options['feed_key']}" if options["feed"] else f"store {store.url}"
        sys.stderr.write(f"live rules job running ({source}); Ctrl-C stops it\n")
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

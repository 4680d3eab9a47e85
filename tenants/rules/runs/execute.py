"""Running a rule over history on Spark: the one path of the Celery task (a tenant's run) and of
`manage.py run_rules` (the operator's backfill), both through `over_history`, which is
`spark.rules.backfill.run_backfill` on the database Django uses.

`execute(run_id)` takes a queued `RuleRun`, marks it running, runs it chunk by chunk with its
figures written as it goes, and ends it done, cancelled or failed. A cancel (`cancel_requested_at`,
set by the API) is seen by a watcher thread within half a second: it cancels the Spark jobs under
way (the run's job group) and the backfill stops at its next check.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import close_old_connections, connection
from django.utils import timezone

from tenants.job_database import database_url
from tenants.models import RuleRun
from tenants.rules.runs.figures import ended_fields
from tenants.rules.runs.services import claims_release

log = logging.getLogger(__name__)
WATCH_SECONDS = 0.5
HEARTBEAT_SECONDS = 5.0
_SESSION: Any = None


def spark_session() -> Any:
    """The worker's Spark session, built once (a JVM start costs seconds)."""
    global _SESSION
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if _SESSION is None:
        from spark.session import build_session

        _SESSION = build_session("rules-runs")
    return _SESSION


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def over_history(
    spark: Any,
    store: Any,
    start_ms: int,
    end_ms: int,
    *,
    tenant: str | None = None,
    rule: str | None = None,
    actions: str = "all",
    progress: Callable | None = None,
    should_stop: Callable[[], bool] | None = None,
    job_group: str | None = None,
    run_id: str | None = None,
    only_action: int | None = None,
) -> dict:
    """Rules over [start_ms, end_ms) of the archive, on Spark (`run_backfill`'s summary); with
    `run_id`, its `new-only` claims belong to that RuleRun; with `only_action` (from 1), only
    that action of the rule fires."""
    from spark.rules.backfill import run_backfill

    return run_backfill(
        spark,
        database_url(),
        store,
        start_ms,
        end_ms,
        tenant=tenant,
        rule=rule,
        actions=actions,
        progress=progress,
        should_stop=should_stop,
        job_group=job_group,
        run_id=run_id,
        only_action=only_action,
    )


class _CancelWatch:
    """Polls the run's row for a cancel; on one, cancels the run's Spark job group. A run no
    longer `running` (failed as stale while its worker was only slow) stops the same way: its
    unconfirmed claims were given back, and a later run may fire those actions."""

    def __init__(self, run_id: Any, spark: Any, group: str) -> None:
        self.run_id, self.spark, self.group = run_id, spark, group
        self.asked = threading.Event()
        self._done = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="rule-run-cancel", daemon=True)

    def _watch(self) -> None:
        from spark.rules.backfill import cancel_job_group

        try:
            beat = 0.0
            while not self._done.wait(WATCH_SECONDS):
                if time.monotonic() - beat >= HEARTBEAT_SECONDS:
                    beat = time.monotonic()
                    RuleRun.objects.filter(pk=self.run_id).update(heartbeat_at=timezone.now())
                asked = list(
                    RuleRun.objects.filter(pk=self.run_id).values_list(
                        "cancel_requested_at", "state"
                    )
                )
                # Asked, ended by another (stale), or the rule and its runs deleted.
                if not asked or asked[0][0] is not None or asked[0][1] != RuleRun.State.RUNNING:
                    self.asked.set()
                    cancel_job_group(self.spark, self.group)
                    return
        except Exception:
            log.exception("rule run %s: the cancel watch stopped", self.run_id)
        finally:
            connection.close()  # this thread's own connection

    def __enter__(self) -> _CancelWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self.thread.join(5)


def _figures(progress: Any) -> dict:
    summary = progress.summary
    return {
        "read": progress.rows_read,
        "considered": summary.matched,  # EMQX's `matched`: the rows FROM took
        "matched": summary.passed,  # the dry run's `match`: FROM and WHERE
        "failed": summary.failed,
        "actions_fired": summary.actions_ok + summary.actions_failed,
        "actions_failed": summary.actions_failed,
        "actions_skipped": summary.actions_skipped,
        "chunks_done": progress.chunk,
        "chunks": progress.chunks,
    }


def execute(
    run_id: Any,
    *,
    spark: Any = None,
    store: Any = None,
    progress: Callable | None = None,
) -> tuple[RuleRun | None, dict | None]:
    """Run a queued RuleRun to its end; (the run as it ended, the backfill's summary). A run
    that is not queued (cancelled before it started, or taken by another worker) is left as is.
    With `SPARK_RUNNER=emr-serverless` and no `spark` given, the run is submitted to the
    cluster (`cluster.execute_on_cluster`); else it runs on this process's Spark."""
    from spark.cluster.emr_serverless import EMR_SERVERLESS, spark_runner

    if spark is None and spark_runner() == EMR_SERVERLESS:
        from tenants.rules.runs.cluster import execute_on_cluster

        return execute_on_cluster(run_id, store=store, progress=progress)
    from common.stores.object_store import open_object_store
    from spark.rules.backfill import NoRules

    close_old_connections()
    now = timezone.now()
    started = RuleRun.objects.filter(pk=run_id, state=RuleRun.State.QUEUED).update(
        state=RuleRun.State.RUNNING, started_at=now, heartbeat_at=now
    )
    run = RuleRun.objects.select_related("rule", "tenant").filter(pk=run_id).first()
    if not started or run is None:
        return run, None
    spark = spark or spark_session()
    store = store or open_object_store()
    group = f"rule-run-{run.id}"
    last_write = [0.0]

    def report(step: Any) -> None:
        if progress is not None:
            progress(step)
        now = time.monotonic()
        if now - last_write[0] >= WATCH_SECONDS or step.chunk == step.chunks:
            last_write[0] = now
            RuleRun.objects.filter(pk=run.pk).update(**_figures(step))

    summary = None
    state, error = RuleRun.State.DONE, ""
    try:
        with _CancelWatch(run.pk, spark, group) as watch:
            summary = over_history(
                spark,
                store,
                _ms(run.start),
                _ms(run.end),
                tenant=run.tenant.slug,
                rule=run.rule.name,
                actions=run.actions,
                progress=report,
                should_stop=watch.asked.is_set,
                job_group=group,
                run_id=str(run.pk),
                only_action=run.only_action,
            )
        if summary.get("cancelled"):
            state = RuleRun.State.CANCELLED
    except NoRules:
        state, error = RuleRun.State.FAILED, "the rule is gone"
    except Exception as exc:
        log.exception("rule run %s failed", run.pk)
        state = RuleRun.State.FAILED
        error = _tenant_words(exc)
    fields: dict = {"state": state, "error": error, "finished_at": timezone.now()}
    if summary is not None:
        fields.update(ended_fields(summary))
    # Claims it could not confirm go back before it is seen ended (a later `new-only` run fires
    # those actions); a worker killed before this leaves them to `runs_reclaim`.
    claims_release(run.pk)
    RuleRun.objects.filter(pk=run.pk).update(**fields)
    return RuleRun.objects.filter(pk=run.pk).first(), summary


def _tenant_words(exc: Exception) -> str:
    """What the tenant reads of a failure: the platform's addresses and traces stay in the log."""
    if isinstance(exc, RuntimeError) and "counters" in str(exc):
        return str(exc)
    return "the run failed on the platform's side (the operators have the details); run it again"

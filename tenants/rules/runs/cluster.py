"""A rule's run over history on the Spark cluster (`SPARK_RUNNER=emr-serverless`): the same
RuleRun life as a local run (`execute.py`), the work done by the cluster.

`execute_on_cluster(run_id)` takes a queued run, marks it running and submits the entry point
`spark/entry/run_rules.py` (`StartJobRun`, the run's id as the client token: a task taken twice
submits once) with the run's range, tenant, rule, actions and id, the database (without its
password: the job reads it from the secret its role may read) and where to report. Then it polls
`GetJobRun` every `SPARK_POLL_SECONDS` (10; `spark.cluster.emr_serverless.wait_for_job`): the
heartbeat goes on, the job's `progress.json` becomes the run's figures, a cancel asked by the tenant (or the run no longer `running`) is
`CancelJobRun`; when the job run ends, its `result.json` says the summary and, on a failure,
the words the tenant reads; a job that ended without one gets `failure_words` of EMR's state
(its `stateDetails` go to the log, for the operators). Once the run holds its figures, the job's
report folder is removed.

A worker lost while it polls: the run is failed as stale (`runs_reclaim`), which also cancels
its job run (the id the worker wrote to `job-run.json` beside the job's reports), and its
unconfirmed claims are given back, as for a local run.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from django.db import close_old_connections
from django.utils import timezone

from tenants.job_database import database_url
from tenants.models import RuleRun
from tenants.rules.runs.figures import ended_fields, figure_fields
from tenants.rules.runs.services import claims_release

log = logging.getLogger(__name__)
ENTRY_POINT = "run_rules"
HEARTBEAT_SECONDS = 5.0


def database_without_password() -> str:
    """The jobs' database as a libpq string, its password left out (never a job argument)."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(database_url())
    params.pop("password", None)
    return make_conninfo(**{k: str(v) for k, v in params.items()})


def _ms(moment: Any) -> int:
    return int(moment.timestamp() * 1000)


def backfill_arguments(
    *,
    start_ms: int,
    end_ms: int,
    report: str,
    store_url: str,
    tenant: str | None = None,
    rule: str | None = None,
    actions: str = "all",
    run_id: str | None = None,
    only_action: int | None = None,
) -> list[str]:
    """The entry point's arguments (spark/entry/run_rules.py)."""
    args = ["--from-ms", str(start_ms), "--to-ms", str(end_ms), "--actions", actions]
    if tenant:
        args += ["--tenant", tenant]
    if rule:
        args += ["--rule", rule]
    if run_id:
        args += ["--run-id", run_id]
    if only_action is not None:
        args += ["--action", str(only_action)]
    args += ["--object-store-url", store_url, "--report", report]
    args += ["--database-url", database_without_password()]
    return args


def step_of(figures: dict) -> Any:
    """A backfill `Progress`-like object of the job's progress.json (what a progress bar reads)."""
    return SimpleNamespace(
        chunk=figures.get("chunks_done", 0),
        chunks=figures.get("chunks", 0),
        rows_read=figures.get("read", 0),
        summary=SimpleNamespace(passed=figures.get("matched", 0), failed=figures.get("failed", 0)),
    )


def execute_on_cluster(
    run_id: Any,
    *,
    runner: Any = None,
    store: Any = None,
    progress: Callable | None = None,
    poll: float | None = None,
) -> tuple[RuleRun | None, dict | None]:
    """Run a queued RuleRun on the cluster to its end; (the run as it ended, the summary)."""
    from common.stores.object_store import open_object_store
    from spark.cluster.emr_serverless import cluster_runner, failure_words, wait_for_job
    from spark.entry import reports

    close_old_connections()
    now = timezone.now()
    started = RuleRun.objects.filter(pk=run_id, state=RuleRun.State.QUEUED).update(
        state=RuleRun.State.RUNNING, started_at=now, heartbeat_at=now
    )
    run = RuleRun.objects.select_related("rule", "tenant").filter(pk=run_id).first()
    if not started or run is None:
        return run, None
    store = store or open_object_store()
    report = reports.rule_run_folder(run.id)
    fields: dict = {}
    summary = None
    try:
        runner = runner or cluster_runner()
        job_run_id = runner.submit(
            ENTRY_POINT,
            backfill_arguments(
                start_ms=_ms(run.start),
                end_ms=_ms(run.end),
                report=report,
                store_url=store.url,
                tenant=run.tenant.slug,
                rule=run.rule.name,
                actions=run.actions,
                run_id=str(run.pk),
                only_action=run.only_action,
            ),
            name=f"rule-run-{run.pk}",
            client_token=str(run.pk),
        )
    except Exception as exc:
        log.exception("rule run %s: the Spark cluster did not take it", run.pk)
        fields = {
            "state": RuleRun.State.FAILED,
            "error": "the platform's Spark cluster did not take the run "
            f"({type(exc).__name__}); nothing ran. Run it again in a few minutes",
        }
    else:
        log.info("rule run %s is job run %s", run.pk, job_run_id)
        # What the stale-run cleanup cancels should this worker be lost (services.runs_reclaim).
        reports.write(store, report, reports.JOB_RUN, {"job_run_id": job_run_id})
        beat = [0.0]

        def every() -> None:
            if time.monotonic() - beat[0] >= HEARTBEAT_SECONDS:
                beat[0] = time.monotonic()
                RuleRun.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now())

        def should_cancel() -> bool:
            row = list(
                RuleRun.objects.filter(pk=run.pk).values_list("cancel_requested_at", "state")
            )
            return not row or row[0][0] is not None or row[0][1] != RuleRun.State.RUNNING

        def report_progress(figures: dict) -> None:
            RuleRun.objects.filter(pk=run.pk).update(**figure_fields(figures))
            if progress is not None:
                progress(step_of(figures))

        state, result = wait_for_job(
            runner,
            job_run_id,
            store,
            report,
            progress=report_progress,
            should_cancel=should_cancel,
            every=every,
            poll=poll,
        )
        summary = (result or {}).get("summary")
        if state.state == "cancelled" and should_cancel():
            fields = {"state": RuleRun.State.CANCELLED, "error": ""}
        elif state.state == "done" and result is not None:
            fields = {"state": result["state"], "error": result.get("error", "")}
        elif result is not None and result.get("error"):
            fields = {"state": RuleRun.State.FAILED, "error": result["error"]}
        elif state.state == "done":
            fields = {
                "state": RuleRun.State.FAILED,
                "error": "the run ended on the Spark cluster without its result (the operators "
                "have its logs); run it again",
            }
        else:
            fields = {"state": RuleRun.State.FAILED, "error": failure_words(state)}
    fields["finished_at"] = timezone.now()
    if summary is not None:
        fields.update(ended_fields(summary))
    claims_release(run.pk)
    RuleRun.objects.filter(pk=run.pk).update(**fields)
    # The job ended and the run holds its figures now: its reports have served (removed after
    # the run's row, so a worker lost in between leaves a folder, swept later, not a run
    # without its summary).
    reports.remove(store, report)
    return RuleRun.objects.filter(pk=run.pk).first(), summary

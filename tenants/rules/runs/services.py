"""Writes of a tenant's rules over history: the preview (reads only, stores nothing), starting a
run (a `RuleRun`, queued for the Celery task that runs it on Spark) and cancelling one.

The ledger of actions done (`RuleActionLedger`, what `new-only` runs consult) forgets messages
older than `RULE_LEDGER_DAYS` (90): a `new-only` run over older messages fires their actions again
(keep it at least as long as the archive keeps history). A run's claims in it that it never
confirmed (its worker killed between claiming and firing) are given back once the run has ended
or gone stale (`runs_reclaim`: at each start of a run, and every minute from Celery beat). A stale
run on the Spark cluster (`SPARK_RUNNER=emr-serverless`) has its job run cancelled too, and the
every-minute cleanup removes the report folders of cluster jobs that no one follows any more.

Bounds (operators' settings, environment variables): a preview covers at most
`RULE_PREVIEW_MAX_DAYS` (7) and its evaluator at most `RULE_PREVIEW_SECONDS` (10 s), a tenant
previews at most `RULE_PREVIEW_RATE` (30/min) times; a run covers at most `RULE_RUN_MAX_DAYS`
(31); a rule has one run under way at a time and a tenant `RULE_RUNS_PER_TENANT` (2).
"""

from __future__ import annotations

import logging
import os
from datetime import datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from common.stores.postgres_text import utf8_value
from tenants.models import Rule, RuleRun

log = logging.getLogger(__name__)

PREVIEW_RATE_DEFAULT = "30/min"
ACTIONS = tuple(RuleRun.Actions.values)


def setting_number(name: str, default: float) -> float:
    """A number from Django's settings or the environment (`default` when unset or not one)."""
    from django.conf import settings

    value = getattr(settings, name, None) or os.environ.get(name)
    try:
        return float(value) if value not in (None, "") else default
    except ValueError:
        return default


class RunConflict(Exception):
    """A run cannot start or be cancelled in the state things are in (a 409). `holder`: the run
    under way that holds the rule, when that is why (the answer names it and how to cancel it)."""

    def __init__(self, message: str, holder: RuleRun | None = None) -> None:
        super().__init__(message)
        self.holder = holder


class PreviewThrottled(Exception):
    """The tenant previewed too often; `wait` seconds until it may again."""

    def __init__(self, wait: float) -> None:
        self.wait = wait
        super().__init__(f"Previews were asked too often; try again in {wait:.0f} s.")


def preview_range(
    start: datetime, end: datetime, max_days: float | None
) -> tuple[datetime, datetime]:
    """[start, end) as asked, `end` no later than now (nothing is archived after now)."""
    if start.tzinfo is None or end.tzinfo is None:
        raise ValidationError({"from": ["Give times with a time zone (UTC: a trailing Z)."]})
    now = timezone.now()
    if start >= now:
        raise ValidationError({"from": ["The range starts in the future: nothing is archived."]})
    end = min(end, now)
    if start >= end:
        raise ValidationError({"to": ["`to` must be after `from`."]})
    if max_days is not None and end - start > timedelta(days=max_days):
        raise ValidationError(
            {"to": [f"The range is longer than {max_days:g} days: split it into several."]}
        )
    return start, end


def preview_allowed(scope: str, tenant_id: int) -> None:
    """PreviewThrottled when the tenant previewed too often (`RULE_PREVIEW_RATE`), counted per
    `scope` (a rule's previews apart from an alarm's)."""
    from django.conf import settings

    from tenants.accounts.throttles import hit

    rate = (
        getattr(settings, "RULE_PREVIEW_RATE", None)
        or os.environ.get("RULE_PREVIEW_RATE")
        or PREVIEW_RATE_DEFAULT
    )
    wait = hit(scope, str(tenant_id), rate)
    if wait:
        raise PreviewThrottled(wait)


def _max_outputs(rule: Rule) -> int | None:
    from tenants.tenant.selectors import effective_quota

    return effective_quota(rule.tenant).get("max_rule_outputs")


def run_preview(*, rule: Rule, start: datetime, end: datetime, store: Any = None) -> dict:
    """How many archived messages of the tenant the range holds, how many the rule's FROM takes
    and matches (and fails on), and its first outputs: DuckDB over the tenant's files and the
    rule's evaluator (`common.rule_preview`), within seconds, nothing stored or fired."""
    from common.rule_preview import PreviewTooLong, preview
    from common.stores.object_store import open_object_store

    start, end = preview_range(start, end, setting_number("RULE_PREVIEW_MAX_DAYS", 7))
    preview_allowed("rule-preview", rule.tenant_id)
    try:
        result = preview(
            store or open_object_store(),
            rule.tenant.slug,
            rule.sql,
            start,
            end,
            rule_id=rule.id,
            max_outputs=_max_outputs(rule),
            seconds=setting_number("RULE_PREVIEW_SECONDS", 10.0),
            threads=int(setting_number("RULE_PREVIEW_THREADS", 0)) or None,
        )
    except PreviewTooLong as exc:
        raise ValidationError({"from": [str(exc)]}) from None
    body = result.as_dict()
    body["outputs"] = utf8_value(body["outputs"])
    return {"mode": "preview", "from": start, "to": end, **body}


def run_start(
    *,
    rule: Rule,
    start: datetime,
    end: datetime,
    actions: str = RuleRun.Actions.NEW_ONLY,
    requested_by: str = "",
    dispatch_now: bool = True,
    operator: bool = False,
    only_action: int | None = None,
) -> RuleRun:
    """Queue a run of the rule over [start, end) (its actions fired per `actions`; with
    `only_action`, from 1, only that action of the rule: a re-send from history to one sink);
    the Celery task `tenants.tasks.run_rule_history` runs it. One run of a rule at a time, and
    `RULE_RUNS_PER_TENANT` of a tenant; an `operator`'s run (`manage.py run_rules`) is held to
    neither, nor to the range's length."""
    if actions not in ACTIONS:
        raise ValidationError({"actions": [f"Must be one of {', '.join(ACTIONS)}."]})
    action_problem(rule, only_action)
    max_days = None if operator else setting_number("RULE_RUN_MAX_DAYS", 31)
    start, end = preview_range(start, end, max_days)
    if operator:
        runs_reclaim(tenant_id=rule.tenant_id)  # what a lost worker left, before it claims
        return RuleRun.objects.create(
            tenant_id=rule.tenant_id,
            rule=rule,
            rule_version=rule.version,
            start=start,
            end=end,
            actions=actions,
            only_action=only_action,
            requested_by=requested_by[:254],
        )
    with transaction.atomic():
        # One at a time per tenant, decided under the tenant's row lock: two requests at once
        # cannot both pass the checks.
        type(rule.tenant).objects.select_for_update().filter(pk=rule.tenant_id).first()
        runs_reclaim(tenant_id=rule.tenant_id)
        active = RuleRun.objects.filter(tenant_id=rule.tenant_id, state__in=RuleRun.ACTIVE)
        holder = active.filter(rule=rule).order_by("created_at").first()
        if holder is not None:
            raise RunConflict(
                f"Run {holder.id} of rule {rule.name} is {holder.state}: wait for it to end, or "
                f"cancel it (POST /api/v1/rules/{rule.name}/runs/{holder.id}/cancel, or Cancel "
                "on the rule's page).",
                holder,
            )
        most = int(setting_number("RULE_RUNS_PER_TENANT", 2))
        under_way = list(active.select_related("rule").order_by("created_at")[:most])
        if len(under_way) >= most:
            names = ", ".join(f"run {r.id} of rule {r.rule.name}" for r in under_way)
            raise RunConflict(
                f"{most} runs over history are under way for this tenant, the most at once "
                f"({names}): wait for one to end, or cancel one "
                "(POST /api/v1/rules/{rule}/runs/{id}/cancel).",
                under_way[0],
            )
        run = RuleRun.objects.create(
            tenant_id=rule.tenant_id,
            rule=rule,
            rule_version=rule.version,
            start=start,
            end=end,
            actions=actions,
            only_action=only_action,
            requested_by=requested_by[:254],
        )
        if dispatch_now:
            transaction.on_commit(lambda: _hand_over(run))
    return run


def action_problem(rule: Rule, only_action: int | None) -> None:
    """ValidationError on `action` unless the rule has an action `only_action` (from 1)."""
    if only_action is None:
        return
    count = len(rule.actions or [])
    if (
        isinstance(only_action, bool)
        or not isinstance(only_action, int)
        or not (1 <= only_action <= count)
    ):
        has = f"its actions are 1 to {count}" if count else "it has no actions"
        raise ValidationError(
            {"action": [f"Rule {rule.name} has no action {only_action}: {has} (from 1)."]}
        )


STALE_AFTER = timedelta(minutes=2)  # no heartbeat for this long: its worker is gone
# An operator's backfill that is no RuleRun (`run_rules` without --rule) owns no heartbeat: its
# claims are given back by itself on any exit it lives through, or after this long (a group of
# actions takes seconds to minutes between its claim and its confirmation).
ORPHAN_CLAIMS_AFTER = timedelta(hours=1)
# The report folders of jobs on the cluster that no process follows any more (spark.entry.reports:
# a backfill's or billing's whose command or worker was lost) go after this long, past the
# longest a job may run (EMR Serverless stops a job run after 12 hours unless told otherwise).
REPORTS_KEEP = timedelta(hours=48)


def claims_release(run_id: Any) -> int:
    """Give back the claims of a run that it never confirmed (a later `new-only` run fires
    those actions); what it confirmed stays. How many went."""
    from tenants.models import RuleActionLedger

    deleted, _ = RuleActionLedger.objects.filter(run_id=run_id, fired=False).delete()
    return deleted


def runs_reclaim(*, tenant_id: int | None = None, now: datetime | None = None) -> dict:
    """The stale-run cleanup (of one tenant, or all): runs whose worker stopped (no heartbeat
    for STALE_AFTER) end as failed, since they would block their rule; then every claim left
    unconfirmed by a run no longer under way (failed, cancelled, or done with its ledger writes
    refused) is deleted, and so are ownerless claims older than ORPHAN_CLAIMS_AFTER. A
    `new-only` run fires those actions again: one that fired just before its worker died fires
    twice (at least once, never zero times). `{"failed": runs, "released": claims}`."""
    from django.db.models import Q

    from tenants.models import RuleActionLedger

    now = now or timezone.now()
    runs = (
        RuleRun.objects.all() if tenant_id is None else RuleRun.objects.filter(tenant_id=tenant_id)
    )
    stale = runs.filter(state=RuleRun.State.RUNNING, heartbeat_at__lt=now - STALE_AFTER)
    on_cluster = _on_cluster()
    lost = [str(pk) for pk in stale.values_list("pk", flat=True)] if on_cluster else []
    failed = stale.update(
        state=RuleRun.State.FAILED,
        finished_at=now,
        error="the worker running it stopped (its figures are what it had done); run it again",
    )
    if lost:
        _cancel_job_runs(lost)
    if on_cluster and tenant_id is None:  # (the every-minute cleanup, not a run's start)
        _sweep_job_reports(now)
    claims = RuleActionLedger.objects.filter(fired=False)
    if tenant_id is not None:
        claims = claims.filter(rule__tenant_id=tenant_id)
    ended = claims.filter(run__isnull=False).exclude(run__state__in=RuleRun.ACTIVE)
    orphaned = claims.filter(Q(run__isnull=True) & Q(done_at__lt=now - ORPHAN_CLAIMS_AFTER))
    released = ended.delete()[0] + orphaned.delete()[0]
    if failed or released:
        log.warning(
            "rule runs: %d stale runs failed, %d unconfirmed claims given back", failed, released
        )
    return {"failed": failed, "released": released}


def _on_cluster() -> bool:
    from spark.cluster.emr_serverless import EMR_SERVERLESS, spark_runner

    try:
        return spark_runner() == EMR_SERVERLESS
    except Exception:  # a wrong setting is named where a job is submitted
        return False


def _cancel_job_runs(run_ids: list[str]) -> None:
    """The job runs of runs whose worker was lost, cancelled on the cluster (a lost worker
    cannot): each run's job run id is the one its worker recorded beside the job's reports.
    Never raises (the cleanup goes on); what fails is logged."""
    from common.stores.object_store import open_object_store
    from spark.cluster.emr_serverless import cancel_reported, cluster_runner
    from spark.entry.reports import rule_run_folder

    try:
        runner, store = cluster_runner(), open_object_store()
    except Exception:
        log.exception("rule runs: cannot reach the Spark cluster to cancel lost runs' jobs")
        return
    for run_id in run_ids:
        try:
            job = cancel_reported(runner, store, rule_run_folder(run_id))
        except Exception:
            log.exception("rule run %s: its job run could not be cancelled", run_id)
            continue
        if job is not None:
            log.warning("rule run %s: its worker was lost; job run %s cancelled", run_id, job)


def _sweep_job_reports(now: datetime) -> None:
    """Report folders of jobs that ended without their follower removing them (its worker or
    command was lost): a run's once it is not under way, the others after REPORTS_KEEP. Never
    raises (the cleanup goes on)."""
    from common.stores.object_store import open_object_store
    from spark.entry.reports import sweep

    try:
        active = {
            str(pk)
            for pk in RuleRun.objects.filter(state__in=RuleRun.ACTIVE).values_list("pk", flat=True)
        }
        gone = sweep(open_object_store(), active_runs=active, keep=REPORTS_KEEP, now=now)
    except Exception:
        log.exception("rule runs: the cluster jobs' report folders could not be swept")
        return
    if gone:
        log.info("cluster jobs: %d report folders no one followed removed: %s", len(gone), gone)


# The Celery task that runs a rule over history (`tenants.tasks.run_rule_history`).
RUN_TASK = "tenants.tasks.run_rule_history"


def dispatch(run: RuleRun) -> None:
    """Hand the run to a Celery worker through the project's app (`control_plane.celery_app`,
    loaded with Django). The task is sent by its name, as Celery beat sends its tasks:
    `tenants.tasks` imports this package to run the task, so importing it back would close an
    import circle. No result is kept: the run's row is its result. Some unit tests replace this
    with an in-process runner; tests/control_plane/test_rule_run_handover.py crosses the real
    hand-over."""
    from celery import current_app

    current_app.send_task(RUN_TASK, args=[str(run.id)], ignore_result=True)


def _hand_over(run: RuleRun) -> None:
    """`dispatch`, and when the hand-over fails (no Celery broker answers), the run ends
    `failed` with the reason in words rather than waiting `queued` for a worker that will never
    hear of it (and holding its rule)."""
    try:
        dispatch(run)
    except Exception as exc:
        log.warning("rule run %s: could not hand it to a worker: %s", run.id, exc)
        now = timezone.now()
        RuleRun.objects.filter(pk=run.pk, state=RuleRun.State.QUEUED).update(
            state=RuleRun.State.FAILED,
            finished_at=now,
            error="it could not be handed to a worker (the task queue did not answer: "
            f"{type(exc).__name__}); nothing ran. Try again in a minute; if it fails again, "
            "the platform's operators are told by its logs",
        )
        run.refresh_from_db()


def run_cancel(run: RuleRun) -> RuleRun:
    """Cancel a run: a queued one at once; a running one stops at its next chunk or group of
    actions, and its Spark jobs under way are cancelled (the executor watches for this)."""
    now = timezone.now()
    if run.state == RuleRun.State.QUEUED:
        updated = RuleRun.objects.filter(pk=run.pk, state=RuleRun.State.QUEUED).update(
            state=RuleRun.State.CANCELLED, cancel_requested_at=now, finished_at=now
        )
        if updated:
            run.refresh_from_db()
            return run
        run.refresh_from_db()
    if run.state == RuleRun.State.RUNNING:
        RuleRun.objects.filter(pk=run.pk, cancel_requested_at__isnull=True).update(
            cancel_requested_at=now
        )
        run.refresh_from_db()
        return run
    raise RunConflict(f"The run is {run.state} already: there is nothing to cancel.")


def ledger_prune(now: datetime | None = None) -> int:
    """Forget the actions done for messages older than `RULE_LEDGER_DAYS`; how many rows went."""
    from tenants.models import RuleActionLedger

    cutoff = (now or timezone.now()) - timedelta(days=setting_number("RULE_LEDGER_DAYS", 90))
    deleted, _ = RuleActionLedger.objects.filter(message_ts__lt=cutoff).delete()
    return deleted

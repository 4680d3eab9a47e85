"""Celery tasks of the tenant domain (scheduled by CELERY_BEAT_SCHEDULE in settings)."""

from celery import shared_task

from tenants.devices import services as device_services
from tenants.rules.runs.services import RUN_TASK


@shared_task(name="tenants.tasks.expire_credentials")
def expire_credentials() -> int:
    """Revoke credentials past their expiry; the broker hears it through NOTIFY and disconnects."""
    return device_services.credentials_expire()


@shared_task(name="tenants.tasks.fleet_certificates_purge")
def fleet_certificates_purge() -> int:
    """Forget certificates created over MQTT (fleet provisioning) never registered to a device."""
    from tenants.fleet.services import unregistered_certificates_purge

    return unregistered_certificates_purge()


@shared_task(name="tenants.tasks.compact_archive")
def compact_archive() -> list[dict]:
    """Compact the archive's hours closed for more than a few minutes (live segments of all
    tenants into per-tenant history); a crashed or overlapping run is finished by the next."""
    from common.archive.files import compact_due
    from common.stores.object_store import open_object_store
    from tenants.archive_lock import archive_lock

    with archive_lock():  # markers are rewritten by retention too
        return [result.as_dict() for result in compact_due(open_object_store())]


@shared_task(name="tenants.tasks.history_retention")
def history_retention() -> dict:
    """Hourly: delete each tenant's history hours older than its history policies keep."""
    from tenants.history.retention import retention_run

    result = retention_run()
    return {k: result[k] for k in ("now", "hours_deleted", "bytes_deleted", "unknown")}


@shared_task(name="tenants.tasks.journey_upkeep")
def journey_upkeep() -> dict:
    """Compact the journey's closed hours and delete what each plan no longer keeps."""
    from tenants.journey.upkeep import upkeep

    return upkeep()


def _previous_period(today):
    first = today.replace(day=1)
    from datetime import timedelta

    return (first - timedelta(days=1)).strftime("%Y-%m")


@shared_task(name="tenants.tasks.billing_draft_previous_month")
def billing_draft_previous_month(today: str | None = None) -> dict:
    """On the 1st: draft last month's invoices (the Spark job; issued ones are left alone)."""
    from datetime import date

    from tenants.billing import services as billing

    day = date.fromisoformat(today) if today else date.today()
    summary = billing.billing_report(_previous_period(day))
    return {"period": summary["period"], "tenants": summary["tenants"]}


@shared_task(name="tenants.tasks.billing_issue_due")
def billing_issue_due(today: str | None = None) -> dict:
    """Daily: once last month's grace period (BILLING_GRACE_DAYS) is over, re-run it — usage
    that arrived during the grace period is billed in place — and issue its drafts."""
    from datetime import date

    from django.conf import settings

    from tenants.billing import services as billing
    from tenants.models import Invoice

    day = date.fromisoformat(today) if today else date.today()
    period = _previous_period(day)
    if day.day <= settings.BILLING_GRACE_DAYS:
        return {"period": period, "issued": 0, "waiting": True}
    if not Invoice.objects.filter(period=period, status=Invoice.Status.DRAFT).exists():
        return {"period": period, "issued": 0, "waiting": False}
    summary = billing.billing_report(period, issue=True)
    issued = sum(1 for i in summary["invoices"] if i["state"] == "issued")
    return {"period": period, "issued": issued, "waiting": False}


@shared_task(name="tenants.tasks.sample_storage")
def sample_storage() -> dict:
    """Hourly: the bytes each tenant stores, as this hour's storage byte-hours in the usage log
    (once per hour however often it runs)."""
    from tenants.usage.storage import storage_sample

    result = storage_sample()
    return {"hour": result["hour"], "state": result["state"], "tenants": len(result["tenants"])}


@shared_task(name="tenants.tasks.shadow_history_purge")
def shadow_history_purge() -> int:
    """Hourly: device shadow versions older than their plan's `shadow_history_days` go."""
    from tenants.shadows.services import shadow_history_purge as purge

    return purge()


@shared_task(name="tenants.tasks.jobs_upkeep")
def jobs_upkeep() -> dict:
    """Every minute: IN_PROGRESS job executions past their timeout become TIMED_OUT (AWS's
    in-progress and step timeouts), jobs whose abort criteria are met are cancelled, and
    rollouts release their next devices (the devices concerned are told on MQTT), and jobs with
    nothing left to do are completed (one whose last update found its row held). The job
    executions queued meanwhile (retries too) go to the usage log, the bill's source."""
    from tenants.jobs import metering as job_metering
    from tenants.jobs import services as job_services

    timed_out = job_services.jobs_time_out()
    aborted = job_services.jobs_abort()
    released = job_services.jobs_roll_out()
    completed = job_services.jobs_complete_ended()
    metered = job_metering.job_usage_log()
    return {
        "timed_out": timed_out,
        "aborted": aborted,
        "released": released,
        "completed": completed,
        "metered": metered,
    }


@shared_task(name="tenants.tasks.job_announcements_purge")
def job_announcements_purge() -> int:
    """Hourly: jobs notifications published more than a week ago go."""
    from tenants.jobs.services import job_announcements_purge as purge

    return purge()


@shared_task(name="tenants.tasks.usage_log_rollup")
def usage_log_rollup() -> dict:
    """The rules job's metered rows (usage log) into the portal's usage minutes."""
    from tenants.billing import services as billing

    return billing.usage_log_rollup()


@shared_task(name="tenants.tasks.budget_check")
def budget_check() -> dict:
    """Every minute: each tenant's month to date against its budget (alerts once per threshold
    per month, the spend control set or lifted) and its quotas nearing (tenants.budgets.alerts)."""
    from tenants.budgets.alerts import check_all

    return check_all()


@shared_task(name="tenants.tasks.alarm_emails")
def alarm_emails() -> dict:
    """Every ALARM_EMAIL_SECONDS (5): the alarms' due emails sent from their outbox, each row
    on its own, tried again later when refused (tenants.alarms.emails)."""
    from tenants.alarms.emails import send_due

    return send_due()


@shared_task(name=RUN_TASK, acks_late=False)
def run_rule_history(run_id: str) -> dict:
    """A tenant's run of a rule over its archived history, on Spark (`tenants.rules.runs`).
    Acknowledged when taken: a worker lost mid-run leaves the run `running` rather than
    running its actions a second time."""
    from tenants.rules.runs.execute import execute

    run, _ = execute(run_id)
    return {"id": run_id, "state": run.state if run is not None else "gone"}


@shared_task(name="tenants.tasks.reclaim_rule_runs")
def reclaim_rule_runs() -> dict:
    """Every minute: runs whose worker was lost end as failed, and the action claims they (or
    any run that ended) never confirmed are given back, so a later `new-only` run fires them."""
    from tenants.rules.runs.services import runs_reclaim

    return runs_reclaim()


@shared_task(name="tenants.tasks.prune_action_ledger")
def prune_action_ledger() -> dict:
    """Daily: forget the rule actions done for messages older than RULE_LEDGER_DAYS."""
    from tenants.rules.runs.services import ledger_prune

    return {"deleted": ledger_prune()}

"""Writes of jobs and device groups from the control plane (the REST API, Celery beat).

A job is created for devices named, and for the members of static groups named, at the time it
is created (AWS's snapshot jobs): each gets a QUEUED execution. Cancelling a job cancels its
queued executions, and with `force` its in-progress ones; Celery beat times out IN_PROGRESS
executions past their job's timeout (`jobs_time_out`). Each of these changes tells the devices
concerned on `$aws/things/{device}/jobs/notify` and `/notify-next`, as AWS does, by leaving the
messages in a `JobAnnouncement` row for a broker to publish (`common.jobs.announcements`).

Execution rows are locked in id order before they change, as the broker's jobs service locks
them (`data_plane.jobs.store`), so a device's own update and a cancel never deadlock and the
notifications compare the true before and after.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F
from django.utils import timezone

from common.jobs import announcements
from common.jobs import executions as ex
from common.jobs.topics import JOB_ID
from tenants.jobs.artifacts import artifacts_named
from tenants.jobs.metering import executions_queued
from tenants.models import Device, DeviceGroup, Job, JobAnnouncement, JobExecution, Tenant

MAX_DOCUMENT_BYTES = 32 * 1024  # AWS's job document limit
MAX_TIMEOUT_MINUTES = 10080  # a week, as AWS's in-progress timeout
MAX_PER_MINUTE = 1000  # AWS's rollout maximumPerMinute
FAILURE_TYPES = (ex.FAILED, ex.REJECTED, ex.TIMED_OUT, "ALL")  # AWS's abort failureType
EXECUTED = (ex.SUCCEEDED, ex.FAILED, ex.REJECTED, ex.TIMED_OUT)  # "executed things"
RESERVED_JOB_IDS = ("artifacts",)  # /api/v1/jobs/artifacts is the artifacts' collection


class JobConflict(Exception):
    """A job id already taken, or a change the job's state does not allow (HTTP 409)."""


def _epoch(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp())


def execution_of(row: JobExecution) -> ex.Execution:
    """A stored execution as `common.jobs.executions` works on it (`job` and `device` loaded)."""
    return ex.Execution(
        job_id=row.job.job_id,
        thing=row.device.name,
        status=row.status,
        status_details=row.status_details or {},
        queued_at=_epoch(row.queued_at),
        last_updated_at=_epoch(row.last_updated_at),
        version_number=row.version_number,
        execution_number=row.execution_number,
        started_at=_epoch(row.started_at),
        document=row.job.document,
        timeout_at=_epoch(row.timeout_at),
        job_timeout_minutes=row.job.timeout_minutes,
        retry_criteria=row.job.retry_criteria or [],
        failed_retries=row.failed_retries,
        timed_out_retries=row.timed_out_retries,
    )


def _pending(device_ids: Iterable[int], lock: bool) -> dict[int, list[ex.Execution]]:
    """Each device's pending executions in AWS's order (locked, in id order, when `lock`)."""
    rows = (
        JobExecution.objects.filter(device_id__in=list(device_ids), status__in=ex.PENDING)
        .select_related("job", "device")
        # A job's targets and unreleased devices may name thousands: not read once per row.
        .defer("job__targets", "job__unreleased", "job__abort_criteria")
    )
    if lock:
        rows = rows.select_for_update(of=("self",)).order_by("id")
    found: dict[int, list[ex.Execution]] = defaultdict(list)
    for row in rows:
        found[row.device_id].append(execution_of(row))
    return {device: ex.pending_order(items) for device, items in found.items()}


def _announce(
    tenant: Tenant, names: dict[int, str], before: dict[int, list], after: dict[int, list]
) -> JobAnnouncement | None:
    """Leave the notifications `before` → `after` calls for, per device, for a broker."""
    now = int(time.time())
    replies: list[list] = []
    for device_id, name in names.items():
        changes = ex.notifications(name, before.get(device_id, []), after.get(device_id, []), now)
        replies.extend([topic, body] for topic, body in changes)
    if not replies:
        return None
    row = JobAnnouncement.objects.create(tenant=tenant, replies=replies)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_notify(%s, %s)", [announcements.CHANNEL, announcements.payload(row.id)]
        )
    return row


def _complete_ended(job_ids: Iterable[int]) -> None:
    """Jobs whose last execution ended are COMPLETED (a cancelled one stays CANCELED); one whose
    row another transaction holds is left to it, or to `jobs_complete_ended`."""
    for job_id in sorted(set(job_ids)):  # one order: two callers never wait on each other
        with connection.cursor() as cursor:
            cursor.execute(ex.COMPLETION_LOCK_SQL, [job_id])
            cursor.execute(ex.COMPLETE_SQL, [job_id, job_id])


def jobs_complete_ended() -> int:
    """Running jobs with nothing left to do (every execution ended, no device left to release)
    become COMPLETED: those whose last update found the job's row held (a cancel that then
    found nothing to cancel, an edit). Returns how many. Part of the minute's upkeep."""
    done = (
        Job.objects.filter(status=Job.Status.IN_PROGRESS, unreleased=[])
        .exclude(executions__status__in=ex.PENDING)
        .values_list("id", flat=True)
    )
    completed = 0
    for job_id in list(done):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(ex.COMPLETION_LOCK_SQL, [job_id])
            cursor.execute(ex.COMPLETE_SQL, [job_id, job_id])
            completed += cursor.rowcount
    return completed


def _names(value, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValidationError({field: ["Must be a list of names."]})
    return list(dict.fromkeys(value))


def _targets(tenant: Tenant, targets) -> tuple[list[Device], dict]:
    """The devices a job's targets name (groups expanded), or 400 naming what is unknown."""
    if not isinstance(targets, dict) or set(targets) - {"devices", "groups"}:
        raise ValidationError({"targets": ["Must be {devices: [names], groups: [names]}."]})
    device_names = _names(targets.get("devices"), "targets.devices")
    group_names = _names(targets.get("groups"), "targets.groups")
    devices = {d.name: d for d in Device.objects.filter(tenant=tenant, name__in=device_names)}
    unknown = [n for n in device_names if n not in devices]
    if unknown:
        raise ValidationError({"targets.devices": [f"Unknown devices: {', '.join(unknown)}."]})
    groups = {g.name: g for g in DeviceGroup.objects.filter(tenant=tenant, name__in=group_names)}
    unknown = [n for n in group_names if n not in groups]
    if unknown:
        raise ValidationError({"targets.groups": [f"Unknown groups: {', '.join(unknown)}."]})
    for group in groups.values():
        for device in group.devices.all():
            devices.setdefault(device.name, device)
    if not devices:
        raise ValidationError({"targets": ["Name at least one device, or a group with members."]})
    return list(devices.values()), {"devices": device_names, "groups": group_names}


def _abort_criteria(criteria) -> list[dict]:
    """AWS's abortConfig criteria, checked: [{failure_type, threshold_percentage,
    min_executed_things}] (the action is always CANCEL)."""
    if criteria is None:
        return []
    if not isinstance(criteria, list) or len(criteria) > len(FAILURE_TYPES):
        raise ValidationError({"abort": ["At most one criterion per failure type, as a list."]})
    checked = []
    for item in criteria:
        kind = item.get("failure_type") if isinstance(item, dict) else None
        threshold = item.get("threshold_percentage") if isinstance(item, dict) else None
        minimum = item.get("min_executed_things", 1) if isinstance(item, dict) else None
        if (
            kind not in FAILURE_TYPES
            or type(threshold) not in (int, float)
            or not 0 < threshold <= 100
            or type(minimum) is not int
            or minimum < 1
        ):
            raise ValidationError(
                {
                    "abort": [
                        "Each criterion: failure_type FAILED, REJECTED, TIMED_OUT or ALL; "
                        "threshold_percentage above 0 up to 100; min_executed_things ≥ 1."
                    ]
                }
            )
        checked.append(
            {
                "failure_type": kind,
                "threshold_percentage": threshold,
                "min_executed_things": minimum,
            }
        )
    return checked


def _retry_criteria(criteria) -> list[dict]:
    """AWS's jobExecutionsRetryConfig criteria, checked: [{failure_type FAILED | TIMED_OUT |
    ALL, number_of_retries 0-10}], one per failure type, ALL alone."""
    if criteria is None:
        return []
    words = (
        "Each criterion: failure_type FAILED, TIMED_OUT or ALL (ALL alone), once each; "
        f"number_of_retries from 0 to {ex.MAX_RETRIES}."
    )
    if not isinstance(criteria, list) or len(criteria) > 2:
        raise ValidationError({"retry": [words]})
    checked = []
    for item in criteria:
        kind = item.get("failure_type") if isinstance(item, dict) else None
        count = item.get("number_of_retries") if isinstance(item, dict) else None
        if (
            kind not in ex.RETRY_FAILURE_TYPES
            or type(count) is not int
            or not 0 <= count <= ex.MAX_RETRIES
        ):
            raise ValidationError({"retry": [words]})
        checked.append({"failure_type": kind, "number_of_retries": count})
    kinds = [c["failure_type"] for c in checked]
    if len(set(kinds)) != len(kinds) or (ex.RETRY_ALL in kinds and len(kinds) > 1):
        raise ValidationError({"retry": [words]})
    return checked


def job_create(
    *,
    tenant: Tenant,
    job_id: str,
    document,
    targets,
    timeout_minutes: int | None = None,
    description: str = "",
    rollout_per_minute: int | None = None,
    abort_criteria: list | None = None,
    retry_criteria: list | None = None,
    actor: str = "",
) -> Job:
    """Create a job and a QUEUED execution for each device it targets (with a rollout, for the
    first `rollout_per_minute` of them; Celery beat releases the rest); its devices are told."""
    if not isinstance(job_id, str) or not JOB_ID.match(job_id):
        raise ValidationError({"job_id": ["Use 1-64 letters, digits, '_' or '-'."]})
    if job_id in RESERVED_JOB_IDS:
        raise ValidationError({"job_id": [f"{job_id!r} is reserved (/api/v1/jobs/{job_id})."]})
    if not isinstance(document, dict):
        raise ValidationError({"document": ["The job document must be a JSON object."]})
    if len(ex.dumps(document)) > MAX_DOCUMENT_BYTES:
        raise ValidationError({"document": [f"At most {MAX_DOCUMENT_BYTES} bytes of JSON."]})
    if timeout_minutes is not None and (
        type(timeout_minutes) is not int or not 1 <= timeout_minutes <= MAX_TIMEOUT_MINUTES
    ):
        raise ValidationError(
            {"timeout_minutes": [f"Minutes from 1 to {MAX_TIMEOUT_MINUTES}, or null."]}
        )
    if rollout_per_minute is not None and (
        type(rollout_per_minute) is not int or not 1 <= rollout_per_minute <= MAX_PER_MINUTE
    ):
        raise ValidationError(
            {"rollout": [f"maximum_per_minute: from 1 to {MAX_PER_MINUTE}, or no rollout."]}
        )
    criteria = _abort_criteria(abort_criteria)
    retries = _retry_criteria(retry_criteria)
    artifacts = artifacts_named(tenant=tenant, document=document)
    devices, named = _targets(tenant, targets)
    devices.sort(key=lambda d: d.name)
    first = devices[:rollout_per_minute] if rollout_per_minute else devices
    taken = JobConflict(f"A job {job_id!r} already exists.")
    try:
        with transaction.atomic():
            if Job.objects.filter(tenant=tenant, job_id=job_id).exists():
                raise taken
            now = timezone.now()
            job = Job.objects.create(
                tenant=tenant,
                job_id=job_id,
                document=document,
                targets=named,
                timeout_minutes=timeout_minutes,
                description=description or "",
                rollout_per_minute=rollout_per_minute,
                unreleased=[d.id for d in devices[len(first) :]],
                released_at=now,
                abort_criteria=criteria,
                retry_criteria=retries,
                artifacts=artifacts,
                created_by=actor,
            )
            _release(job, first, now)
    except IntegrityError:
        if Job.objects.filter(tenant=tenant, job_id=job_id).exists():
            raise taken from None  # the same id, created meanwhile by a concurrent request
        raise
    return job


def _release(job: Job, devices: list[Device], now: datetime) -> None:
    """Queue an execution of `job` for each of `devices` and tell them."""
    ids = {d.id: d.name for d in devices}
    before = _pending(ids, lock=True)
    JobExecution.objects.bulk_create(
        JobExecution(tenant_id=job.tenant_id, job=job, device=d, queued_at=now, last_updated_at=now)
        for d in devices
    )
    executions_queued(job.tenant_id, len(devices))
    _announce(job.tenant, ids, before, _pending(ids, lock=False))


def jobs_roll_out(now: datetime | None = None) -> int:
    """Release the next `rollout_per_minute` devices of each rolling job whose last release is a
    minute old (devices deleted meanwhile are skipped); returns how many executions were
    queued. Celery beat runs it every minute."""
    now = now or timezone.now()
    released = 0
    due = Job.objects.filter(
        status=Job.Status.IN_PROGRESS,
        rollout_per_minute__isnull=False,
        released_at__lte=now - timedelta(seconds=59),
    ).exclude(unreleased=[])
    for job_id in due.values_list("id", flat=True):
        with transaction.atomic():
            job = Job.objects.select_for_update(skip_locked=True).filter(id=job_id).first()
            if job is None or job.status != Job.Status.IN_PROGRESS or not job.unreleased:
                continue
            batch, job.unreleased = (
                job.unreleased[: job.rollout_per_minute],
                job.unreleased[job.rollout_per_minute :],
            )
            devices = list(Device.objects.filter(tenant_id=job.tenant_id, id__in=batch))
            devices.sort(key=lambda d: batch.index(d.id))
            job.released_at = now
            job.save(update_fields=["unreleased", "released_at"])
            _release(job, devices, now)
            _complete_ended([job.id])  # every device of the batch was deleted: maybe done
            released += len(devices)
    return released


def _criterion_met(job: Job, counts: dict[str, int]) -> str:
    """The reason the first abort criterion met gives, or ""."""
    executed = sum(counts.get(status, 0) for status in EXECUTED)
    for criterion in job.abort_criteria or []:
        kind = criterion["failure_type"]
        failed = sum(counts.get(s, 0) for s in (FAILURE_TYPES[:3] if kind == "ALL" else [kind]))
        if executed >= criterion["min_executed_things"] and executed:
            share = 100 * failed / executed
            if share >= criterion["threshold_percentage"]:
                return (
                    f"aborted: {failed} of {executed} executed {kind} ({share:.0f} %, "
                    f"threshold {criterion['threshold_percentage']} %)"
                )
    return ""


def jobs_abort(now: datetime | None = None) -> list[str]:
    """Cancel the running jobs whose abort criteria are met (their queued executions and the
    devices not yet released; IN_PROGRESS ones run to their end); the job ids aborted. Celery
    beat runs it every minute."""
    aborted = []
    jobs = Job.objects.filter(status=Job.Status.IN_PROGRESS).exclude(abort_criteria=[])
    for job in jobs:
        counts = dict(
            JobExecution.objects.filter(job=job)
            .values_list("status")
            .annotate(n=Count("id"))
            .values_list("status", "n")
        )
        reason = _criterion_met(job, counts)
        if reason:
            try:
                job_cancel(job=job, reason=reason)
            except JobConflict:  # it completed meanwhile
                continue
            aborted.append(job.job_id)
    return aborted


def job_cancel(*, job: Job, force: bool = False, reason: str = "canceled") -> Job:
    """Cancel a job: its queued executions become CANCELED (and devices not yet released never
    get one), and with `force` its IN_PROGRESS ones too (without, they go on to their end, as
    AWS). 409 for a completed job."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(id=job.id)
        if job.status == Job.Status.COMPLETED:
            raise JobConflict("The job is COMPLETED: nothing is left to cancel.")
        statuses = ex.PENDING if force else (ex.QUEUED,)
        ids = dict(
            JobExecution.objects.filter(job=job, status__in=statuses).values_list(
                "device_id", "device__name"
            )
        )
        before = _pending(ids, lock=True)
        now = timezone.now()
        JobExecution.objects.filter(job=job, status__in=statuses).update(
            status=ex.CANCELED,
            version_number=F("version_number") + 1,
            last_updated_at=now,
            timeout_at=None,
        )
        if job.status != Job.Status.CANCELED:
            job.reason = reason[:255]
        job.status, job.completed_at = Job.Status.CANCELED, job.completed_at or now
        job.unreleased = []
        job.save(update_fields=["status", "completed_at", "unreleased", "reason"])
        _announce(job.tenant, ids, before, _pending(ids, lock=False))
    return job


def jobs_time_out(now: datetime | None = None) -> int:
    """IN_PROGRESS executions past their timeout become TIMED_OUT, or, within their job's
    retry criteria, are queued again as a new execution (AWS's retry on TIMED_OUT); their
    devices are told. Returns how many timed out. Celery beat runs it every minute."""
    now = now or timezone.now()
    timed_out = 0
    with transaction.atomic():
        due = list(
            JobExecution.objects.filter(status=ex.IN_PROGRESS, timeout_at__lte=now)
            .select_for_update(skip_locked=True, of=("self",))
            .select_related("device", "tenant", "job")
            .defer("job__targets", "job__unreleased", "job__abort_criteria")
            .order_by("id")[:5000]
        )
        by_tenant: dict[int, list[JobExecution]] = defaultdict(list)
        for row in due:
            by_tenant[row.tenant_id].append(row)
        for rows in by_tenant.values():
            ids = {row.device_id: row.device.name for row in rows}
            before = _pending(ids, lock=True)
            retries = _time_out(rows, now)
            executions_queued(rows[0].tenant_id, retries)
            _complete_ended(row.job_id for row in rows)
            _announce(rows[0].tenant, ids, before, _pending(ids, lock=False))
            timed_out += len(rows)
    return timed_out


def _time_out(rows: list[JobExecution], now: datetime) -> int:
    """Time `rows` out: TIMED_OUT, or queued again where the job's retries allow; returns how
    many were queued again."""
    ended, again = [], []
    for row in rows:
        timed = ex.ended(execution_of(row), ex.TIMED_OUT, int(now.timestamp()))
        (again if ex.retry_due(timed) else ended).append(row.id)
    JobExecution.objects.filter(id__in=ended).update(
        status=ex.TIMED_OUT,
        version_number=F("version_number") + 1,
        last_updated_at=now,
        timeout_at=None,
    )
    JobExecution.objects.filter(id__in=again).update(
        status=ex.QUEUED,
        status_details={},
        version_number=1,
        execution_number=F("execution_number") + 1,
        timed_out_retries=F("timed_out_retries") + 1,
        queued_at=now,
        started_at=None,
        last_updated_at=now,
        timeout_at=None,
    )
    return len(again)


def job_announcements_purge(days: int = 7) -> int:
    """Published announcements older than `days` go (they were news, not history)."""
    cutoff = timezone.now() - timedelta(days=days)
    deleted, _ = JobAnnouncement.objects.filter(created_at__lt=cutoff).delete()
    return deleted


# -- device groups -----------------------------------------------------------------------


def _devices_named(tenant: Tenant, names) -> list[Device]:
    wanted = _names(names, "devices")
    devices = list(Device.objects.filter(tenant=tenant, name__in=wanted))
    unknown = sorted(set(wanted) - {d.name for d in devices})
    if unknown:
        raise ValidationError({"devices": [f"Unknown devices: {', '.join(unknown)}."]})
    return devices


def group_create(*, tenant: Tenant, name: str, devices=None) -> DeviceGroup:
    """A static group of devices (AWS's static thing group); 409 when the name is taken."""
    group = DeviceGroup(tenant=tenant, name=name if isinstance(name, str) else "")
    group.full_clean(exclude=["tenant", "devices"], validate_unique=False)
    members = _devices_named(tenant, devices)
    taken = JobConflict(f"A group {group.name!r} already exists.")
    try:
        with transaction.atomic():
            if DeviceGroup.objects.filter(tenant=tenant, name=group.name).exists():
                raise taken
            group.save()
            group.devices.add(*members)
    except IntegrityError:
        if DeviceGroup.objects.filter(tenant=tenant, name=group.name).exists():
            raise taken from None  # the same name, taken meanwhile by a concurrent request
        raise
    return group


def group_add_devices(*, group: DeviceGroup, devices) -> DeviceGroup:
    """Add devices of the group's tenant to it (those already in it stay)."""
    group.devices.add(*_devices_named(group.tenant, devices))
    return group


def group_remove_devices(*, group: DeviceGroup, devices) -> DeviceGroup:
    group.devices.remove(*_devices_named(group.tenant, devices))
    return group


def group_delete(group: DeviceGroup) -> None:
    """Delete a group (its devices stay). Jobs already made for it keep their executions: a job
    targets the members a group had when the job was made (AWS's snapshot jobs)."""
    group.delete()

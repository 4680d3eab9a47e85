"""Reads of jobs and device groups, scoped to a tenant (another tenant's job or group is a 404,
indistinguishable from one that does not exist)."""

from __future__ import annotations

from django.db.models import Count, Prefetch, Q, QuerySet
from django.http import Http404

from common.jobs import executions as ex
from common.jobs.artifacts import NAME
from common.jobs.topics import JOB_ID
from tenants.models import Device, DeviceGroup, Job, JobArtifact, JobExecution, Tenant

_COUNTS = {
    f"count_{status.lower()}": Count("executions", filter=Q(executions__status=status))
    for status in ex.STATUSES
}


def job_list(*, tenant: Tenant, status: str | None = None) -> QuerySet[Job]:
    jobs = Job.objects.filter(tenant=tenant).annotate(**_COUNTS)
    if status:
        jobs = jobs.filter(status=status)
    return jobs.order_by("-created_at", "-id")


def job_get(*, tenant: Tenant, job_id: str) -> Job:
    """The job with its execution counts and executions (devices loaded), or 404."""
    if not JOB_ID.match(job_id):  # no job can have it (and NUL never reaches Postgres)
        raise Http404("No such job.")
    executions = JobExecution.objects.select_related("device").order_by("device__name")
    job = (
        Job.objects.filter(tenant=tenant, job_id=job_id)
        .annotate(**_COUNTS)
        .prefetch_related(Prefetch("executions", queryset=executions))
        .first()
    )
    if job is None:
        raise Http404("No such job.")
    return job


def process_details(job: Job) -> dict:
    """How many of the job's executions are in each state (AWS's jobProcessDetails)."""
    return {status: getattr(job, f"count_{status.lower()}", 0) for status in ex.STATUSES}


def group_list(*, tenant: Tenant) -> QuerySet[DeviceGroup]:
    return DeviceGroup.objects.filter(tenant=tenant).prefetch_related("devices").order_by("name")


def group_names(*, tenant: Tenant) -> list[str]:
    return list(group_list(tenant=tenant).values_list("name", flat=True))


def group_get(*, tenant: Tenant, name: str) -> DeviceGroup:
    if "\x00" in name:
        raise Http404("No such group.")
    group = DeviceGroup.objects.filter(tenant=tenant, name=name).prefetch_related("devices").first()
    if group is None:
        raise Http404("No such group.")
    return group


def jobs_for_group(group: DeviceGroup) -> QuerySet[Job]:
    """The jobs made for a group (its members then), newest first."""
    return job_list(tenant=group.tenant).filter(targets__groups__contains=[group.name])


def artifact_list(*, tenant: Tenant) -> QuerySet[JobArtifact]:
    return JobArtifact.objects.filter(tenant=tenant).order_by("name")


def artifact_get(*, tenant: Tenant, name: str) -> JobArtifact:
    """The tenant's artifact `name`, or 404 (another tenant's too)."""
    artifact = (
        JobArtifact.objects.filter(tenant=tenant, name=name).first() if NAME.match(name) else None
    )
    if artifact is None:
        raise Http404("No such artifact.")
    return artifact


def artifact_by_slug(*, slug: str, name: str) -> JobArtifact:
    """The artifact a signed download URL names (its tenant by slug), or 404."""
    if not NAME.match(name) or "\x00" in slug:
        raise Http404("No such artifact.")
    artifact = (
        JobArtifact.objects.filter(tenant__slug=slug, name=name).select_related("tenant").first()
    )
    if artifact is None:
        raise Http404("No such artifact.")
    return artifact


def executions_list(*, job: Job) -> QuerySet[JobExecution]:
    """The job's executions, one per device it reached."""
    return job.executions.all()


def group_members(*, group: DeviceGroup) -> QuerySet[Device]:
    return group.devices.all()

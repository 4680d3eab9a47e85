"""Jobs (AWS IoT Jobs): the static device groups jobs target, a job's document for its devices,
each device's execution, the notifications the control plane leaves for a broker to publish, the
artifacts (firmware) and the executions metered; reads and writes are `tenants.jobs`, the
broker's side `data_plane.jobs`."""

from __future__ import annotations

from django.db import models
from django.db.models.functions import Now
from django.utils import timezone

from tenants.models.devices import Device
from tenants.models.names import DEVICE_NAME_VALIDATOR
from tenants.models.tenant import Tenant


class DeviceGroup(models.Model):
    """A static group of devices by name (AWS's static thing groups): jobs target groups."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="device_groups")
    name = models.CharField(max_length=128, validators=[DEVICE_NAME_VALIDATOR])
    devices = models.ManyToManyField(Device, related_name="groups", blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="device_group_unique_name")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Job(models.Model):
    """A job (AWS IoT Jobs): a document for the devices it targets, each of which gets an
    execution (`JobExecution`), served on `$aws/things/{device}/jobs/…` (`data_plane.jobs`)."""

    class Status(models.TextChoices):
        IN_PROGRESS = "IN_PROGRESS"
        CANCELED = "CANCELED"
        COMPLETED = "COMPLETED"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="jobs")
    job_id = models.CharField(max_length=64)
    description = models.CharField(max_length=2028, blank=True, default="")
    document = models.JSONField(default=dict, blank=True)
    targets = models.JSONField(default=dict, blank=True, help_text="{devices: [], groups: []}")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.IN_PROGRESS)
    timeout_minutes = models.PositiveIntegerField(
        null=True, blank=True, help_text="an IN_PROGRESS execution times out after this"
    )
    # Rollout (AWS's maximumPerMinute): devices not yet given an execution wait in `unreleased`
    # (device ids, in order) and Celery beat releases up to this many each minute.
    rollout_per_minute = models.PositiveIntegerField(null=True, blank=True)
    unreleased = models.JSONField(default=list, blank=True)
    released_at = models.DateTimeField(null=True, blank=True)
    # Abort criteria (AWS's abortConfig): [{failure_type, threshold_percentage,
    # min_executed_things}]; Celery beat cancels the job when one is met.
    abort_criteria = models.JSONField(default=list, blank=True)
    # Retries (AWS's jobExecutionsRetryConfig): [{failure_type FAILED | TIMED_OUT | ALL,
    # number_of_retries}]; a FAILED or TIMED_OUT execution within them is queued again.
    retry_criteria = models.JSONField(default=list, db_default=[], blank=True)
    # The artifacts its document names (`${aws:iot:s3-presigned-url:artifact/NAME}`), checked
    # when it was created: an artifact a running job names cannot be deleted.
    artifacts = models.JSONField(default=list, db_default=[], blank=True)
    reason = models.CharField(max_length=255, blank=True, default="", help_text="why it ended")
    created_by = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "job_id"], name="job_unique_id")]
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.job_id


class JobExecution(models.Model):
    """One device's execution of a job, with AWS's states (`common.jobs.executions`). Written
    by the broker's jobs service (psycopg, the row locked) and by the control plane (a job's
    cancel, the timeouts)."""

    class Status(models.TextChoices):
        QUEUED = "QUEUED"
        IN_PROGRESS = "IN_PROGRESS"
        SUCCEEDED = "SUCCEEDED"
        FAILED = "FAILED"
        TIMED_OUT = "TIMED_OUT"
        REJECTED = "REJECTED"
        REMOVED = "REMOVED"
        CANCELED = "CANCELED"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="executions")
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="job_executions")
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.QUEUED)
    status_details = models.JSONField(default=dict, blank=True)
    version_number = models.BigIntegerField(default=1)
    execution_number = models.BigIntegerField(default=1)
    queued_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    last_updated_at = models.DateTimeField(default=timezone.now)
    timeout_at = models.DateTimeField(
        null=True, blank=True, help_text="an IN_PROGRESS execution becomes TIMED_OUT then"
    )
    # Retries made so far, by the failure that called for them (`execution_number` - 1 in all).
    failed_retries = models.PositiveIntegerField(default=0, db_default=0)
    timed_out_retries = models.PositiveIntegerField(default=0, db_default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["job", "device"], name="job_execution_unique")
        ]
        indexes = [
            models.Index(fields=["device", "status"], name="job_execution_device"),
            models.Index(
                fields=["timeout_at"],
                name="job_execution_timeout",
                condition=models.Q(status="IN_PROGRESS"),
            ),
        ]
        ordering = ["id"]


class JobAnnouncement(models.Model):
    """Notifications of a jobs change the control plane made, for a broker to publish
    (`common.jobs.announcements`)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    replies = models.JSONField(default=list, blank=True, help_text="[[topic, body], ...]")
    published_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        indexes = [models.Index(fields=["created_at"], name="job_announcement_age")]


class JobArtifact(models.Model):
    """A file a tenant uploaded for its jobs (firmware), kept in the object store under its
    prefix (`common.jobs.artifacts.object_key`) and handed to devices as short-lived URLs."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="job_artifacts")
    name = models.CharField(max_length=128)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    content_type = models.CharField(max_length=255, blank=True, default="")
    created_by = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="job_artifact_unique_name")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class JobMeter(models.Model):
    """Job executions queued (new ones and retries), counted in the transaction that queued
    them, by the control plane or a broker; `tenants.jobs.metering` writes them to the usage
    log once (`batch`: the rows written together, `logged_at`: when written)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    executions = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now, db_default=Now())
    batch = models.BigIntegerField(null=True, blank=True)
    logged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(
                fields=["id"], name="job_meter_unlogged", condition=models.Q(logged_at=None)
            )
        ]

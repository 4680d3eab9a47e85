"""REST API for jobs (AWS IoT's CreateJob, ListJobs, DescribeJob with its executions,
CancelJob) and static device groups (AWS's static thing groups), which jobs target.

Thin, as the other views: the work is in `tenants.jobs.services` and `tenants.jobs.selectors`.
Jobs and groups are looked up in the caller's tenant only, so another tenant's job ids and group
names are 404s and its device names are "unknown devices"."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiExample, OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response

from tenants.api.pagination import PAGE_PARAMETERS, page_of
from tenants.api.serializers import StrictInput
from tenants.api.views import TenantAPIView, paginated, text_param, validated
from tenants.jobs import selectors as job_selectors
from tenants.jobs import services as job_services
from tenants.models import Job


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"
    default_detail = "Conflict."


class TargetsInput(StrictInput):
    devices = serializers.ListField(child=serializers.CharField(), required=False, default=list)
    groups = serializers.ListField(child=serializers.CharField(), required=False, default=list)


class RolloutInput(StrictInput):
    maximum_per_minute = serializers.IntegerField(
        min_value=1, max_value=1000, help_text="devices given an execution per minute"
    )


class AbortCriterionInput(StrictInput):
    failure_type = serializers.ChoiceField(choices=["FAILED", "REJECTED", "TIMED_OUT", "ALL"])
    threshold_percentage = serializers.FloatField(min_value=0.0001, max_value=100)
    min_executed_things = serializers.IntegerField(min_value=1, default=1)


class AbortInput(StrictInput):
    criteria = serializers.ListField(child=AbortCriterionInput(), max_length=4)


class RetryCriterionInput(StrictInput):
    failure_type = serializers.ChoiceField(choices=["FAILED", "TIMED_OUT", "ALL"])
    number_of_retries = serializers.IntegerField(min_value=0, max_value=10)


class RetryInput(StrictInput):
    criteria = serializers.ListField(child=RetryCriterionInput(), min_length=1, max_length=2)


class JobCreateInput(StrictInput):
    job_id = serializers.CharField(max_length=64, help_text="1-64 letters, digits, '_' or '-'")
    document = serializers.JSONField(help_text="the job document (a JSON object, ≤ 32 KiB)")
    targets = TargetsInput(help_text="devices by name, and static groups whose members get it")
    description = serializers.CharField(max_length=2028, required=False, default="")
    timeout_minutes = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="an IN_PROGRESS execution becomes TIMED_OUT after this many minutes",
    )
    rollout = RolloutInput(
        required=False, allow_null=True, default=None, help_text="AWS's rollout rate"
    )
    abort = AbortInput(
        required=False,
        allow_null=True,
        default=None,
        help_text="cancel the job when a share of the executed devices failed",
    )
    retry = RetryInput(
        required=False,
        allow_null=True,
        default=None,
        help_text="AWS's jobExecutionsRetryConfig: queue a FAILED or TIMED_OUT execution again",
    )


class JobCancelInput(StrictInput):
    force = serializers.BooleanField(
        required=False, default=False, help_text="also cancel IN_PROGRESS executions"
    )


class ExecutionOutput(serializers.Serializer):
    device = serializers.CharField(source="device.name")
    status = serializers.CharField()
    status_details = serializers.JSONField()
    version_number = serializers.IntegerField()
    execution_number = serializers.IntegerField(help_text="1, then one more for each retry")
    retry_attempt = serializers.SerializerMethodField(
        help_text="retries made for this device (AWS's retryAttempt)"
    )
    retries = serializers.SerializerMethodField(help_text="{FAILED: n, TIMED_OUT: n}")
    queued_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    last_updated_at = serializers.DateTimeField()

    def get_retry_attempt(self, execution) -> int:
        return execution.failed_retries + execution.timed_out_retries

    def get_retries(self, execution) -> dict:
        return {"FAILED": execution.failed_retries, "TIMED_OUT": execution.timed_out_retries}


class JobOutput(serializers.Serializer):
    job_id = serializers.CharField()
    status = serializers.CharField(help_text="IN_PROGRESS | CANCELED | COMPLETED")
    description = serializers.CharField()
    document = serializers.JSONField()
    targets = serializers.JSONField()
    timeout_minutes = serializers.IntegerField(allow_null=True)
    rollout = serializers.SerializerMethodField(help_text="{maximum_per_minute} or null")
    abort = serializers.SerializerMethodField(help_text="{criteria: [...]} or null")
    retry = serializers.SerializerMethodField(help_text="{criteria: [...]} or null")
    artifacts = serializers.ListField(
        child=serializers.CharField(), help_text="the artifacts its document names"
    )
    not_yet_released = serializers.SerializerMethodField(
        help_text="devices the rollout has not given an execution yet"
    )
    reason = serializers.CharField(help_text="why it ended (completed, canceled, aborted: …)")
    created_at = serializers.DateTimeField()
    completed_at = serializers.DateTimeField(allow_null=True)
    process_details = serializers.SerializerMethodField(
        help_text="how many executions are in each state"
    )

    def get_rollout(self, job) -> dict | None:
        per_minute = job.rollout_per_minute
        return None if per_minute is None else {"maximum_per_minute": per_minute}

    def get_abort(self, job) -> dict | None:
        return {"criteria": job.abort_criteria} if job.abort_criteria else None

    def get_retry(self, job) -> dict | None:
        return {"criteria": job.retry_criteria} if job.retry_criteria else None

    def get_not_yet_released(self, job) -> int:
        return len(job.unreleased or [])

    def get_process_details(self, job) -> dict:
        return job_selectors.process_details(job)


class JobDetailOutput(JobOutput):
    executions = ExecutionOutput(many=True, read_only=True)


class GroupInput(StrictInput):
    name = serializers.CharField(max_length=64)
    devices = serializers.ListField(child=serializers.CharField(), required=False, default=list)


class GroupDevicesInput(StrictInput):
    devices = serializers.ListField(child=serializers.CharField(), allow_empty=False)


class GroupOutput(serializers.Serializer):
    name = serializers.CharField()
    devices = serializers.SerializerMethodField(help_text="the names of its members")
    created_at = serializers.DateTimeField()

    def get_devices(self, group) -> list[str]:
        return sorted(device.name for device in job_selectors.group_members(group=group))


CREATE_EXAMPLE = OpenApiExample(
    "firmware update",
    value={
        "job_id": "firmware-2-1",
        "document": {"operation": "update", "version": "2.1"},
        "targets": {"devices": ["lamp-1"], "groups": ["kitchen"]},
        "timeout_minutes": 30,
    },
)


def _detail(job_id: str, tenant) -> Response:
    return Response(JobDetailOutput(job_selectors.job_get(tenant=tenant, job_id=job_id)).data)


class JobListView(TenantAPIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("status", str, enum=list(Job.Status.values), description="filter"),
            *PAGE_PARAMETERS,
        ],
        responses=page_of(JobOutput),
        operation_id="v1_jobs_list",
    )
    def get(self, request):
        wanted = text_param(request, "status")
        if wanted and wanted not in Job.Status.values:
            raise exceptions.ValidationError({"status": [f"One of {', '.join(Job.Status)}."]})
        jobs = job_selectors.job_list(tenant=self.tenant, status=wanted)
        return paginated(self, request, jobs, JobOutput)

    @extend_schema(
        request=JobCreateInput,
        responses={201: JobDetailOutput},
        examples=[CREATE_EXAMPLE],
        description="AWS's CreateJob: each device named, and each member of each group named, "
        "gets a QUEUED execution and is told on `$aws/things/{device}/jobs/notify` and "
        "`/notify-next`. 400 names unknown devices, groups or artifacts; 409 when the job id "
        "is taken.",
    )
    def post(self, request):
        data = validated(JobCreateInput, request.data)
        rollout, abort, retry = data.pop("rollout"), data.pop("abort"), data.pop("retry")
        actor = getattr(request.user, "email", "") or str(request.user)
        try:
            job = job_services.job_create(
                tenant=self.tenant,
                actor=actor,
                rollout_per_minute=rollout["maximum_per_minute"] if rollout else None,
                abort_criteria=abort["criteria"] if abort else None,
                retry_criteria=retry["criteria"] if retry else None,
                **data,
            )
        except job_services.JobConflict as error:
            raise Conflict(str(error)) from None
        body = _detail(job.job_id, self.tenant).data
        return Response(body, status=status.HTTP_201_CREATED)


class JobDetailView(TenantAPIView):
    @extend_schema(
        responses=JobDetailOutput,
        description="AWS's DescribeJob, with each device's execution (ListJobExecutionsForJob).",
    )
    def get(self, request, job_id: str):
        return _detail(job_id, self.tenant)


class JobCancelView(TenantAPIView):
    @extend_schema(
        request=JobCancelInput,
        responses=JobDetailOutput,
        description="AWS's CancelJob: QUEUED executions become CANCELED (with `force`, "
        "IN_PROGRESS ones too); the devices are told. 409 for a COMPLETED job.",
    )
    def post(self, request, job_id: str):
        job = job_selectors.job_get(tenant=self.tenant, job_id=job_id)
        data = validated(JobCancelInput, request.data or {})
        try:
            job_services.job_cancel(job=job, force=data["force"])
        except job_services.JobConflict as error:
            raise Conflict(str(error)) from None
        return _detail(job_id, self.tenant)


class GroupListView(TenantAPIView):
    @extend_schema(
        parameters=PAGE_PARAMETERS, responses=page_of(GroupOutput), operation_id="v1_groups_list"
    )
    def get(self, request):
        return paginated(self, request, job_selectors.group_list(tenant=self.tenant), GroupOutput)

    @extend_schema(
        request=GroupInput,
        responses={201: GroupOutput},
        description="A static group of devices (AWS's static thing group), by name.",
    )
    def post(self, request):
        data = validated(GroupInput, request.data)
        try:
            group = job_services.group_create(tenant=self.tenant, **data)
        except job_services.JobConflict as error:
            raise Conflict(str(error)) from None
        group = job_selectors.group_get(tenant=self.tenant, name=group.name)
        return Response(GroupOutput(group).data, status=status.HTTP_201_CREATED)


class GroupDetailView(TenantAPIView):
    @extend_schema(responses=GroupOutput)
    def get(self, request, name: str):
        return Response(GroupOutput(job_selectors.group_get(tenant=self.tenant, name=name)).data)

    @extend_schema(
        responses={204: None},
        description="Delete the group (its devices stay; jobs made for it keep their executions).",
    )
    def delete(self, request, name: str):
        job_services.group_delete(job_selectors.group_get(tenant=self.tenant, name=name))
        return Response(status=status.HTTP_204_NO_CONTENT)


class GroupDevicesView(TenantAPIView):
    @extend_schema(
        request=GroupDevicesInput,
        responses=GroupOutput,
        description="Add devices to the group (400 names those that are not the tenant's).",
    )
    def post(self, request, name: str):
        group = job_selectors.group_get(tenant=self.tenant, name=name)
        data = validated(GroupDevicesInput, request.data)
        job_services.group_add_devices(group=group, devices=data["devices"])
        return Response(GroupOutput(job_selectors.group_get(tenant=self.tenant, name=name)).data)

    @extend_schema(request=GroupDevicesInput, responses=GroupOutput)
    def delete(self, request, name: str):
        group = job_selectors.group_get(tenant=self.tenant, name=name)
        data = validated(GroupDevicesInput, request.data)
        job_services.group_remove_devices(group=group, devices=data["devices"])
        return Response(GroupOutput(job_selectors.group_get(tenant=self.tenant, name=name)).data)

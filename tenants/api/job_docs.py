"""The OpenAPI words of the jobs and device-group endpoints (tenants/api/job_views.py), merged
into `tenants.api.docs`."""

from __future__ import annotations

JOB_TAGS = [
    {
        "name": "Jobs",
        "description": "AWS IoT Jobs: a document for devices and groups, and each device's "
        "execution of it (QUEUED, IN_PROGRESS, SUCCEEDED, FAILED, TIMED_OUT, REJECTED, REMOVED, "
        "CANCELED). Devices use `$aws/things/{name}/jobs/...` on MQTT.",
    },
    {
        "name": "Device groups",
        "description": "Static groups of the tenant's devices by name (AWS's static thing "
        "groups): a job aimed at a group reaches the members it has when the job is created.",
    },
]
TENANT_404 = "Another tenant's object is a 404, as if it did not exist."

JOB_OPERATIONS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("get", "/api/v1/jobs"): (
        "Jobs",
        "List the tenant's jobs",
        "Newest first, each with how many of its executions are in each state "
        "(`process_details`); `status` filters by IN_PROGRESS, CANCELED or COMPLETED.",
    ),
    ("post", "/api/v1/jobs"): (
        "Jobs",
        "Create a job for devices and groups",
        "AWS's CreateJob: `job_id` (1-64 letters, digits, '_' or '-'), `document` (a JSON "
        "object up to 32 KiB), `targets` {devices, groups} and an optional `timeout_minutes` "
        "for IN_PROGRESS executions. Each device named, and each member of each group named, "
        "gets a QUEUED execution and is told on `…/jobs/notify` and `…/jobs/notify-next`. 400 "
        "names unknown devices or groups; 409 when the job id is taken.",
    ),
    ("get", "/api/v1/jobs/{job_id}"): (
        "Jobs",
        "Show a job and each device's execution",
        "AWS's DescribeJob with ListJobExecutionsForJob: the document, status, counts per "
        "state and, per device, its execution's status, statusDetails, versionNumber and "
        "times. " + TENANT_404,
    ),
    ("post", "/api/v1/jobs/{job_id}/cancel"): (
        "Jobs",
        "Cancel a job",
        "AWS's CancelJob: QUEUED executions become CANCELED; with `force` IN_PROGRESS ones too "
        "(without, they run to their end). The devices concerned are told on MQTT. 409 for a "
        "COMPLETED job. " + TENANT_404,
    ),
    ("get", "/api/v1/groups"): (
        "Device groups",
        "List the device groups",
        "The tenant's static device groups by name, each with the names of its members.",
    ),
    ("post", "/api/v1/groups"): (
        "Device groups",
        "Create a device group",
        "A static group by `name` (as a device name), optionally with `devices` as members; "
        "400 names devices the tenant does not have, 409 when the name is taken.",
    ),
    ("get", "/api/v1/groups/{name}"): (
        "Device groups",
        "Show a device group",
        "The group's name, members and when it was made. " + TENANT_404,
    ),
    ("post", "/api/v1/groups/{name}/devices"): (
        "Device groups",
        "Add devices to a group",
        "The devices named join the group (those already in it stay); 400 names those the "
        "tenant does not have. Jobs created later reach them.",
    ),
    ("delete", "/api/v1/groups/{name}/devices"): (
        "Device groups",
        "Remove devices from a group",
        "The devices named leave the group; executions they already have are not touched.",
    ),
}

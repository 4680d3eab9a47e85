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
        "name": "Job artifacts",
        "description": "Files for jobs (firmware), kept in the platform's object store under "
        "the tenant's prefix; a job document names one as "
        "`${aws:iot:s3-presigned-url:artifact/NAME}` and devices get a short-lived URL.",
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
        "for IN_PROGRESS executions, `retry` criteria for FAILED or TIMED_OUT ones. Each "
        "device named, and each member of each group named, gets a QUEUED execution and is "
        "told on `…/jobs/notify` and `…/jobs/notify-next`. 400 names unknown devices, groups "
        "or artifacts; 409 when the job id is taken.",
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
    ("get", "/api/v1/jobs/artifacts"): (
        "Job artifacts",
        "List the job artifacts",
        "The tenant's artifacts by name, each with its size, SHA-256, who uploaded it and the "
        "`placeholder` a job document writes to hand it to devices.",
    ),
    ("post", "/api/v1/jobs/artifacts"): (
        "Job artifacts",
        "Upload a job artifact",
        "The file as the raw body with `?name=NAME`, or as multipart `file` (with `name`, else "
        "its file name). 409 when the name is taken (delete the old one first: an artifact is "
        "never replaced in place), 413 over JOB_ARTIFACT_MAX_BYTES, 400 naming a bad name.",
    ),
    ("get", "/api/v1/jobs/artifacts/{name}"): (
        "Job artifacts",
        "Show a job artifact",
        "Its name, size, SHA-256, content type, uploader, time and placeholder. " + TENANT_404,
    ),
    ("delete", "/api/v1/jobs/artifacts/{name}"): (
        "Job artifacts",
        "Delete a job artifact",
        "Removes the file from the object store; 409 naming the running jobs whose documents "
        "name it (URLs already handed out then answer 404). " + TENANT_404,
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
    ("delete", "/api/v1/groups/{name}"): (
        "Device groups",
        "Delete a device group",
        "The group goes; its devices stay, jobs made for it keep their executions, and the "
        "provisioning templates that named it no longer put new devices in it. " + TENANT_404,
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

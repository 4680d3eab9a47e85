"""Job executions as AWS IoT Jobs has devices see them: the documents of its MQTT API (field
names as AWS spells them: `jobId`, `status`, `statusDetails`, `queuedAt`, `versionNumber`, …,
times in epoch seconds), its error document (`{code, message, clientToken, timestamp,
executionState}`) and the state transitions a device may make.

    QUEUED ──start-next / update IN_PROGRESS──▶ IN_PROGRESS ──update──▶ SUCCEEDED | FAILED | REJECTED
      │                                            │
      └─ update SUCCEEDED | FAILED | REJECTED      ├─ past its timeout (Celery beat) ──▶ TIMED_OUT
                                                   └─ its job cancelled with force ───▶ CANCELED
    a queued execution of a cancelled job: CANCELED; of a device that left the job: REMOVED
    FAILED or TIMED_OUT within the job's retries (AWS's jobExecutionsRetryConfig) ──▶ QUEUED
      again, as a new execution: `executionNumber` + 1, `versionNumber` 1

Pure functions on `Execution` values: the broker (`data_plane.jobs`) and the control plane
(`tenants.jobs.services`) read rows their own way and share these."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from common import json_input
from common.contracts import tables

QUEUED, IN_PROGRESS = "QUEUED", "IN_PROGRESS"
SUCCEEDED, FAILED, REJECTED = "SUCCEEDED", "FAILED", "REJECTED"
TIMED_OUT, REMOVED, CANCELED = "TIMED_OUT", "REMOVED", "CANCELED"
STATUSES = (QUEUED, IN_PROGRESS, SUCCEEDED, FAILED, TIMED_OUT, REJECTED, REMOVED, CANCELED)
PENDING = (IN_PROGRESS, QUEUED)
TERMINAL = (SUCCEEDED, FAILED, TIMED_OUT, REJECTED, REMOVED, CANCELED)
# Whoever ends executions takes this lock on their job (its row id; held to the end of the
# transaction) before asking whether any is left pending: two devices' last updates committing
# together would otherwise each see the other's execution still pending, and neither would
# complete the job. An advisory lock, not the job's row: cancelling locks that row first and the
# executions after, the devices' updates the other way round.
COMPLETION_LOCK_SQL = "SELECT pg_advisory_xact_lock(hashtextextended('job-completion:' || %s, 0))"
# Then, with that lock held, the job (its row id, twice) is COMPLETED if nothing is left to do.
# Its row is taken only if nobody holds it (SKIP LOCKED): a cancel holds it and then locks the
# executions, which whoever ends executions already holds; waiting for the row would be a
# deadlock. Skipped, the holder ends the job itself (a cancel, a release) or the minute's
# upkeep completes it (`tenants.job_services.jobs_complete_ended`).
COMPLETE_SQL = f"""
UPDATE {tables.JOB} SET status = 'COMPLETED', completed_at = now(), reason = 'completed'
 WHERE id = (SELECT id FROM {tables.JOB} WHERE id = %s AND status = 'IN_PROGRESS'
               AND unreleased = '[]'::jsonb FOR UPDATE SKIP LOCKED)
   AND NOT EXISTS (SELECT 1 FROM {tables.JOB_EXECUTION}
                    WHERE job_id = %s AND status IN ('QUEUED', 'IN_PROGRESS'))
"""
DEVICE_SETS = (IN_PROGRESS, SUCCEEDED, FAILED, REJECTED)  # what an update may ask for
ENDED_BY_SERVICE = (TIMED_OUT, REMOVED, CANCELED)  # not the device's doing

# AWS's error codes (`RejectedErrorCode` of the device SDK).
INVALID_TOPIC, INVALID_JSON, INVALID_REQUEST = "InvalidTopic", "InvalidJson", "InvalidRequest"
INVALID_STATE_TRANSITION, RESOURCE_NOT_FOUND = "InvalidStateTransition", "ResourceNotFound"
VERSION_MISMATCH, INTERNAL_ERROR = "VersionMismatch", "InternalError"
REQUEST_THROTTLED, TERMINAL_STATE_REACHED = "RequestThrottled", "TerminalStateReached"

MAX_CLIENT_TOKEN = 64
MAX_STEP_TIMEOUT = 10080  # minutes (AWS: a week); -1 cancels the step timer
MAX_DETAILS = 10  # statusDetails pairs
MAX_DETAIL_KEY, MAX_DETAIL_VALUE = 128, 1024
MAX_REQUEST_BYTES = 32 * 1024
MAX_REQUEST_DEPTH = 8  # a request is flat but for statusDetails (two levels)
MAX_NOTIFY = 15  # executions a ListNotification lists, as AWS
RETRY_ALL = "ALL"
RETRY_FAILURE_TYPES = (FAILED, TIMED_OUT, RETRY_ALL)  # AWS's RetryCriteria failureType
MAX_RETRIES = 10  # AWS's numberOfRetries, per criterion


@dataclass(slots=True)
class Execution:
    job_id: str
    thing: str
    status: str
    status_details: dict[str, Any]
    queued_at: int
    last_updated_at: int
    version_number: int = 1
    execution_number: int = 1
    started_at: int | None = None
    document: Any = None
    timeout_at: int | None = None  # epoch seconds an IN_PROGRESS execution times out
    job_timeout_minutes: int | None = None  # the job's in-progress timeout
    # The job's retry criteria ([{failure_type, number_of_retries}]) and the retries made.
    retry_criteria: list[Any] = field(default_factory=list)
    failed_retries: int = 0
    timed_out_retries: int = 0

    @property
    def pending(self) -> bool:
        return self.status in PENDING


class JobError(Exception):
    """A refused request: AWS's `code` and words, and for a version mismatch or an invalid
    transition the execution's state (`executionState`)."""

    def __init__(self, code: str, message: str, execution: Execution | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.execution = code, message, execution
        self.client_token: str | None = None  # the request's, when it could be read


@dataclass(frozen=True, slots=True)
class Request:
    client_token: str | None = None
    status: str | None = None
    status_details: dict[str, Any] | None = None
    expected_version: int | None = None
    execution_number: int | None = None
    include_document: bool | None = None
    include_state: bool | None = None
    step_timeout: int | None = None


_FIELDS = {
    "clientToken": "client_token",
    "status": "status",
    "statusDetails": "status_details",
    "expectedVersion": "expected_version",
    "executionNumber": "execution_number",
    "includeJobDocument": "include_document",
    "includeJobExecutionState": "include_state",
    "stepTimeoutInMinutes": "step_timeout",
    "thingName": None,  # sent by some SDKs; the topic names the thing
}


def _integer(value: Any, name: str) -> int:
    if type(value) is not int:
        raise JobError(INVALID_REQUEST, f"{name} must be an integer")
    return value


def parse_request(payload: bytes) -> Request:
    """A request's JSON (an empty payload is an empty request), or JobError."""
    if len(payload) > MAX_REQUEST_BYTES:
        raise JobError(INVALID_REQUEST, f"Request exceeds {MAX_REQUEST_BYTES} bytes")
    if not payload.strip():
        return Request()
    try:  # NaN, NUL, lone surrogates, deep nesting: refused here, not by Postgres (a 500)
        body = json_input.loads(payload, max_depth=MAX_REQUEST_DEPTH)
    except json_input.Refused as refused:
        if refused.reason in (json_input.NOT_JSON, json_input.NOT_UTF8):
            raise JobError(INVALID_JSON, "Request is not valid UTF-8 JSON") from None
        raise JobError(INVALID_JSON, f"Request is not valid JSON: {refused.reason}") from None
    if not isinstance(body, dict):
        raise JobError(INVALID_JSON, "Request must be a JSON object")
    token = body.get("clientToken")
    if token is not None and (not isinstance(token, str) or len(token) > MAX_CLIENT_TOKEN):
        raise JobError(INVALID_REQUEST, "clientToken must be a string of at most 64 characters")
    try:
        return _checked(body, token)
    except JobError as error:
        error.client_token = token
        raise


def _checked(body: dict[str, Any], token: str | None) -> Request:
    values: dict[str, Any] = {"client_token": token}
    for key, value in body.items():
        if key not in _FIELDS:
            raise JobError(INVALID_REQUEST, f"Unknown field: {key}")
        name = _FIELDS[key]
        if name is None or name == "client_token" or value is None:
            continue
        if name == "status":
            if value not in STATUSES:
                raise JobError(INVALID_REQUEST, f"Invalid status: {value}")
        elif name == "status_details":
            value = _details(value)
        elif name in ("include_document", "include_state"):
            if type(value) is not bool:
                raise JobError(INVALID_REQUEST, f"{key} must be a boolean")
        elif name == "step_timeout":
            value = _integer(value, key)
            if value != -1 and not 1 <= value <= MAX_STEP_TIMEOUT:
                raise JobError(INVALID_REQUEST, f"{key} must be -1 or 1 to {MAX_STEP_TIMEOUT}")
        else:
            value = _integer(value, key)
        values[name] = value
    return Request(**values)


def _details(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise JobError(INVALID_REQUEST, "statusDetails must be an object of strings")
    if len(value) > MAX_DETAILS:
        raise JobError(INVALID_REQUEST, f"statusDetails holds at most {MAX_DETAILS} pairs")
    for key, text in value.items():
        if not isinstance(text, str) or len(key) > MAX_DETAIL_KEY or len(text) > MAX_DETAIL_VALUE:
            raise JobError(
                INVALID_REQUEST,
                f"statusDetails: keys of at most {MAX_DETAIL_KEY} and string values of at "
                f"most {MAX_DETAIL_VALUE} characters",
            )
    return value


# -- documents ---------------------------------------------------------------------------


def state(e: Execution) -> dict[str, Any]:
    """AWS's JobExecutionState."""
    return {
        "status": e.status,
        "statusDetails": e.status_details,
        "versionNumber": e.version_number,
    }


def summary(e: Execution) -> dict[str, Any]:
    """AWS's JobExecutionSummary (the pending lists)."""
    body = {
        "jobId": e.job_id,
        "queuedAt": e.queued_at,
        "lastUpdatedAt": e.last_updated_at,
        "versionNumber": e.version_number,
        "executionNumber": e.execution_number,
    }
    if e.started_at is not None:
        body["startedAt"] = e.started_at
    return body


def execution_data(e: Execution, include_document: bool = True) -> dict[str, Any]:
    """AWS's JobExecutionData."""
    body = {
        "jobId": e.job_id,
        "thingName": e.thing,
        "status": e.status,
        "statusDetails": e.status_details,
        "queuedAt": e.queued_at,
        "lastUpdatedAt": e.last_updated_at,
        "versionNumber": e.version_number,
        "executionNumber": e.execution_number,
    }
    if e.started_at is not None:
        body["startedAt"] = e.started_at
    if include_document:
        body["jobDocument"] = e.document
    return body


def _stamped(body: dict[str, Any], now: int, client_token: str | None) -> dict[str, Any]:
    body["timestamp"] = now
    if client_token is not None:
        body["clientToken"] = client_token
    return body


def error_document(error: JobError, now: int, client_token: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if error.execution is not None:
        body["executionState"] = state(error.execution)
    return _stamped(body, now, client_token)


def pending_order(executions: list[Execution]) -> list[Execution]:
    """Pending executions in AWS's order: IN_PROGRESS before QUEUED, then by when queued."""
    mine = [e for e in executions if e.pending]
    return sorted(mine, key=lambda e: (e.status != IN_PROGRESS, e.queued_at, e.job_id))


def pending_document(
    pending: list[Execution], now: int, client_token: str | None
) -> dict[str, Any]:
    """GetPendingJobExecutions' answer."""
    body = {
        "inProgressJobs": [summary(e) for e in pending if e.status == IN_PROGRESS],
        "queuedJobs": [summary(e) for e in pending if e.status == QUEUED],
    }
    return _stamped(body, now, client_token)


def execution_document(
    e: Execution | None, now: int, client_token: str | None, **kw: Any
) -> dict[str, Any]:
    """DescribeJobExecution's and StartNextPendingJobExecution's answer (no `execution`: none)."""
    body = {} if e is None else {"execution": execution_data(e, **kw)}
    return _stamped(body, now, client_token)


def update_document(e: Execution, request: Request, now: int) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if request.include_state:
        body["executionState"] = state(e)
    if request.include_document:
        body["jobDocument"] = e.document
    return _stamped(body, now, request.client_token)


def notify_document(pending: list[Execution], now: int) -> dict[str, Any]:
    """A ListNotification (`…/jobs/notify`): up to 15 pending executions by status."""
    jobs: dict[str, list[Any]] = {}
    for e in pending[:MAX_NOTIFY]:
        jobs.setdefault(e.status, []).append(summary(e))
    return {"timestamp": now, "jobs": jobs}


def notify_next_document(next_: Execution | None, now: int) -> dict[str, Any]:
    """A NextNotification (`…/jobs/notify-next`): the next execution, none when none is left."""
    body: dict[str, Any] = {"timestamp": now}
    if next_ is not None:
        body["execution"] = execution_data(next_)
    return body


def notifications(
    thing: str, before: list[Execution], after: list[Execution], now: int
) -> list[tuple[str, dict[str, Any]]]:
    """The notifications a change of a thing's pending list (`before` → `after`, each in
    `pending_order`) calls for, as AWS sends them: `notify` when the list changed, `notify-next`
    when the next one is another (or none)."""
    from common.jobs.topics import notify_next_topic, notify_topic

    out: list[tuple[str, dict[str, Any]]] = []

    def listed(items: list[Execution]) -> list[tuple[Any, ...]]:
        return [(e.job_id, e.status, e.execution_number) for e in items]

    if listed(before) != listed(after):
        out.append((notify_topic(thing), notify_document(after, now)))
    # A retry is a new execution of the same job: the next one changed (AWS tells it again).
    first_before = (before[0].job_id, before[0].execution_number) if before else None
    first_after = (after[0].job_id, after[0].execution_number) if after else None
    if first_before != first_after:
        out.append(
            (notify_next_topic(thing), notify_next_document(after[0] if after else None, now))
        )
    return out


# -- transitions -------------------------------------------------------------------------


def _check(e: Execution, request: Request) -> None:
    if request.execution_number is not None and request.execution_number != e.execution_number:
        raise JobError(RESOURCE_NOT_FOUND, "Job execution not found")
    if e.status in ENDED_BY_SERVICE:
        raise JobError(
            TERMINAL_STATE_REACHED, f"Job execution is in a terminal state: {e.status}", e
        )


def _deadline(e: Execution, started_at: int, step_timeout: int | None, now: int) -> int | None:
    """When an IN_PROGRESS execution times out: the job's in-progress timeout from when it
    started, or the device's step timer if sooner (-1 stops the step timer)."""
    job = started_at + e.job_timeout_minutes * 60 if e.job_timeout_minutes else None
    if step_timeout is None:
        step = e.timeout_at if e.timeout_at is not None and e.timeout_at != job else None
    else:
        step = now + step_timeout * 60 if step_timeout > 0 else None
    found = [t for t in (job, step) if t is not None]
    return min(found) if found else None


def start(e: Execution, request: Request, now: int) -> Execution:
    """StartNextPendingJobExecution on the next pending execution: QUEUED becomes IN_PROGRESS
    (an IN_PROGRESS one is handed back as it is, as AWS does)."""
    if e.status == IN_PROGRESS:
        return e
    started = now
    return replace(
        e,
        status=IN_PROGRESS,
        status_details=request.status_details
        if request.status_details is not None
        else e.status_details,
        started_at=started,
        last_updated_at=now,
        version_number=e.version_number + 1,
        timeout_at=_deadline(e, started, request.step_timeout, now),
    )


def update(e: Execution, request: Request, now: int) -> Execution:
    """UpdateJobExecution: the transition the device asks for, or JobError."""
    _check(e, request)
    if request.status is None:
        raise JobError(INVALID_REQUEST, "status is required")
    if request.status not in DEVICE_SETS:
        raise JobError(
            INVALID_REQUEST, f"status must be one of {', '.join(DEVICE_SETS)}: {request.status}"
        )
    if request.expected_version is not None and request.expected_version != e.version_number:
        raise JobError(VERSION_MISMATCH, "Expected version does not match the execution's", e)
    if e.status in TERMINAL:
        raise JobError(
            INVALID_STATE_TRANSITION,
            f"Cannot update a job execution from {e.status} to {request.status}",
            e,
        )
    started = e.started_at if e.started_at is not None else now
    to = request.status
    return replace(
        e,
        status=to,
        status_details=request.status_details
        if request.status_details is not None
        else e.status_details,
        started_at=started if to == IN_PROGRESS or e.started_at is not None else None,
        last_updated_at=now,
        version_number=e.version_number + 1,
        timeout_at=_deadline(e, started, request.step_timeout, now) if to == IN_PROGRESS else None,
    )


def ended(e: Execution, status: str, now: int) -> Execution:
    """An execution the service ends (TIMED_OUT, CANCELED, REMOVED)."""
    return replace(
        e, status=status, last_updated_at=now, version_number=e.version_number + 1, timeout_at=None
    )


def retry_due(e: Execution) -> bool:
    """Whether the job's retry criteria call for another try of this FAILED or TIMED_OUT
    execution: a criterion of its failure type (or ALL, counting both) with retries left."""
    if e.status not in (FAILED, TIMED_OUT):
        return False
    for criterion in e.retry_criteria or ():
        kind = criterion["failure_type"]
        if kind == RETRY_ALL:
            used = e.failed_retries + e.timed_out_retries
        elif kind == e.status:
            used = e.failed_retries if kind == FAILED else e.timed_out_retries
        else:
            continue
        if used < criterion["number_of_retries"]:
            return True
    return False


def retried(e: Execution, now: int) -> Execution:
    """A FAILED or TIMED_OUT execution queued again as AWS retries it: a new execution of the
    same job for the same thing, `executionNumber` one more, `versionNumber` back to 1, its
    status details, start and timers cleared, queued now."""
    failed = e.status == FAILED
    return replace(
        e,
        status=QUEUED,
        status_details={},
        queued_at=now,
        started_at=None,
        last_updated_at=now,
        version_number=1,
        execution_number=e.execution_number + 1,
        timeout_at=None,
        failed_retries=e.failed_retries + failed,
        timed_out_retries=e.timed_out_retries + (not failed),
    )


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)


def dumps(body: Any) -> bytes:
    return _ENCODER.encode(body).encode()

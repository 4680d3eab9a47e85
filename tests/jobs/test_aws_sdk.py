"""The acceptance test of issue 32's jobs: AWS's own device SDK (`awsiotsdk`, its V2 jobs client
over `awscrt`'s MQTT 3.1.1 and MQTT 5 clients), pointed at our TLS listener with a device
certificate, unchanged apart from the endpoint, port and CA. It runs the jobs flow of AWS's
sample: notify-next tells it of a job created through the REST API, start-next takes it, an
update finishes it (SUCCEEDED); a second job fails (FAILED) after a stale `expectedVersion` is
refused (VersionMismatch), and a finished execution cannot go back (InvalidStateTransition); a
third times out (the Celery beat task, called here) and is then TerminalStateReached."""

from __future__ import annotations

import queue
import time
import uuid
from concurrent.futures import Future
from datetime import timedelta

import awsiot
import pytest
from awscrt import mqtt_request_response
from awsiot import iotjobs, mqtt5_client_builder, mqtt_connection_builder
from django.utils import timezone

from tenants.jobs.services import jobs_time_out
from tests.shadows.conftest import api_client

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def presence_written(transactional_db):
    """After each test, until the broker has written its devices' disconnects: its presence
    transaction (the connection rows, then the tenants' they refer to) and the test database's
    flush (TRUNCATE of every table, tenants first) took their locks in opposite orders and
    deadlocked once in `make test`."""
    yield
    from tenants.models import DeviceConnection

    deadline = time.monotonic() + 10
    while DeviceConnection.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


WAIT = 10


class SdkJobsDevice:
    """A thing connected with the SDK (MQTT 3.1.1 or 5), its V2 jobs client, and its
    notify-next stream opened."""

    def __init__(self, broker, cert: str, key: str, thing: str, version: int) -> None:
        self.thing, self.version = thing, version
        self.next_events: queue.Queue = queue.Queue()
        common = dict(
            endpoint="localhost",
            port=broker.tls_port,
            cert_filepath=cert,
            pri_key_filepath=key,
            ca_filepath=broker.server_ca,
            clean_session=True,
            client_id=thing,
        )
        if version == 5:
            connected: Future = Future()
            self.stopped: Future = Future()
            self.connection = mqtt5_client_builder.mtls_from_path(
                on_lifecycle_connection_success=lambda e: connected.set_result(True),
                on_lifecycle_connection_failure=lambda e: (
                    connected.done()
                    or connected.set_exception(RuntimeError(f"connect failed: {e.exception}"))
                ),
                on_lifecycle_stopped=lambda e: self.stopped.set_result(True),
                **common,
            )
            self.connection.start()
            connected.result(WAIT)
        else:
            self.connection = mqtt_connection_builder.mtls_from_path(keep_alive_secs=30, **common)
            self.connection.connect().result(WAIT)
        options = mqtt_request_response.ClientOptions(
            max_request_response_subscriptions=4,
            max_streaming_subscriptions=2,
            operation_timeout_in_seconds=WAIT,
        )
        self.jobs = iotjobs.IotJobsClientV2(self.connection, options)
        ready: Future = Future()

        def status(event) -> None:
            kind = mqtt_request_response.SubscriptionStatusEventType
            if event.type == kind.SUBSCRIPTION_ESTABLISHED and not ready.done():
                ready.set_result(True)

        self.stream = self.jobs.create_next_job_execution_changed_stream(
            iotjobs.NextJobExecutionChangedSubscriptionRequest(thing_name=thing),
            awsiot.ServiceStreamOptions(self.next_events.put, status),
        )
        self.stream.open()
        ready.result(WAIT)

    def next_event(self) -> iotjobs.NextJobExecutionChangedEvent:
        return self.next_events.get(timeout=WAIT)

    def start_next(self) -> iotjobs.StartNextJobExecutionResponse:
        request = iotjobs.StartNextPendingJobExecutionRequest(thing_name=self.thing)
        return self.jobs.start_next_pending_job_execution(request).result(WAIT)

    def update(self, job_id: str, status: str, **fields) -> iotjobs.UpdateJobExecutionResponse:
        request = iotjobs.UpdateJobExecutionRequest(
            thing_name=self.thing, job_id=job_id, status=status, **fields
        )
        return self.jobs.update_job_execution(request).result(WAIT)

    def describe(self, job_id: str) -> iotjobs.DescribeJobExecutionResponse:
        request = iotjobs.DescribeJobExecutionRequest(thing_name=self.thing, job_id=job_id)
        return self.jobs.describe_job_execution(request).result(WAIT)

    def pending(self) -> iotjobs.GetPendingJobExecutionsResponse:
        request = iotjobs.GetPendingJobExecutionsRequest(thing_name=self.thing)
        return self.jobs.get_pending_job_executions(request).result(WAIT)

    def close(self) -> None:
        self.stream = None
        if self.version == 5:
            self.connection.stop()
            self.stopped.result(WAIT)
        else:
            self.connection.disconnect().result(WAIT)


def refused(call) -> iotjobs.V2ErrorResponse:
    """The service's error response a failing SDK call carried (its `…/rejected` body)."""
    with pytest.raises(awsiot.V2ServiceException) as caught:
        call()
    return caught.value.modeled_error


def create_job(api, job_id: str, thing: str, **extra) -> dict:
    body = {"job_id": job_id, "document": {"firmware": job_id}, "targets": {"devices": [thing]}}
    response = api.post("/api/v1/jobs", {**body, **extra}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


@pytest.mark.parametrize("version", [3, 5], ids=["mqtt311", "mqtt5"])
def test_sdk_jobs_flow(jobs_broker, fleet, version):
    thing = f"pump-{uuid.uuid4().hex[:6]}"
    cert, key = fleet.device(thing)
    api = api_client(fleet.tenant)
    device = SdkJobsDevice(jobs_broker, cert, key, thing, version)
    try:
        assert device.start_next().execution is None  # nothing to do yet
        pending = device.pending()
        assert pending.in_progress_jobs == [] and pending.queued_jobs == []

        # A job created through the REST API reaches the device on notify-next.
        create_job(api, "fw-1", thing)
        told = device.next_event()
        assert told.execution.job_id == "fw-1" and told.execution.status == "QUEUED"
        assert told.execution.job_document == {"firmware": "fw-1"}
        assert told.execution.thing_name == thing and told.execution.version_number == 1

        started = device.start_next().execution
        assert (started.job_id, started.status, started.version_number) == (
            "fw-1",
            "IN_PROGRESS",
            2,
        )
        assert started.job_document == {"firmware": "fw-1"} and started.started_at is not None
        assert [j.job_id for j in device.pending().in_progress_jobs] == ["fw-1"]

        done = device.update(
            "fw-1",
            "SUCCEEDED",
            expected_version=2,
            status_details={"progress": "100%"},
            include_job_execution_state=True,
        )
        assert done.execution_state.status == "SUCCEEDED"
        assert done.execution_state.version_number == 3
        assert done.execution_state.status_details == {"progress": "100%"}
        assert device.next_event().execution is None  # nothing left to do
        job = api.get("/api/v1/jobs/fw-1").json()
        assert job["status"] == "COMPLETED"
        assert [(e["device"], e["status"]) for e in job["executions"]] == [(thing, "SUCCEEDED")]
        assert job["executions"][0]["status_details"] == {"progress": "100%"}
        assert api.post("/api/v1/jobs/fw-1/cancel", {}, format="json").status_code == 409

        # A second job: a stale expectedVersion is refused, then it FAILED, and stays so.
        create_job(api, "fw-2", thing)
        assert device.next_event().execution.job_id == "fw-2"
        assert device.start_next().execution.version_number == 2
        stale = refused(lambda: device.update("fw-2", "FAILED", expected_version=1))
        assert stale.code == "VersionMismatch"
        assert (stale.execution_state.status, stale.execution_state.version_number) == (
            "IN_PROGRESS",
            2,
        )
        assert device.update("fw-2", "FAILED", expected_version=2) is not None
        assert device.next_event().execution is None
        back = refused(lambda: device.update("fw-2", "IN_PROGRESS"))
        assert back.code == "InvalidStateTransition" and back.execution_state.status == "FAILED"
        assert device.describe("fw-2").execution.status == "FAILED"
        assert refused(lambda: device.describe("fw-9")).code == "ResourceNotFound"

        # A third times out: IN_PROGRESS past the job's timeout, as Celery beat finds it.
        create_job(api, "fw-3", thing, timeout_minutes=1)
        assert device.next_event().execution.job_id == "fw-3"
        assert device.start_next().execution.status == "IN_PROGRESS"
        assert jobs_time_out(timezone.now() + timedelta(minutes=2)) == 1
        assert device.next_event().execution is None  # told: it is no longer pending
        assert device.describe("fw-3").execution.status == "TIMED_OUT"
        late = refused(lambda: device.update("fw-3", "SUCCEEDED"))
        assert late.code == "TerminalStateReached"
        assert api.get("/api/v1/jobs/fw-3").json()["process_details"]["TIMED_OUT"] == 1
    finally:
        device.close()


def test_sdk_failed_and_timed_out_executions_are_retried(jobs_broker, fleet):
    """AWS's jobExecutionsRetryConfig as the SDK sees it: a FAILED execution comes back on
    notify-next as execution 2 (versionNumber 1), is started and succeeds; a timed-out one
    comes back too; once the retries are spent, FAILED stays FAILED."""
    from tenants.models import JobMeter

    thing = f"valve-{uuid.uuid4().hex[:6]}"
    cert, key = fleet.device(thing)
    api = api_client(fleet.tenant)
    device = SdkJobsDevice(jobs_broker, cert, key, thing, 5)
    try:
        retry = {"criteria": [{"failure_type": "FAILED", "number_of_retries": 1}]}
        create_job(api, "ota-r", thing, retry=retry)
        assert device.next_event().execution.execution_number == 1
        assert device.start_next().execution.execution_number == 1
        failed = device.update("ota-r", "FAILED", include_job_execution_state=True)
        assert failed.execution_state.status == "FAILED"  # the device's answer stands

        again = device.next_event().execution  # told again: a new execution of the same job
        assert (again.job_id, again.status, again.execution_number) == ("ota-r", "QUEUED", 2)
        assert again.version_number == 1 and again.job_document == {"firmware": "ota-r"}
        started = device.start_next().execution
        assert (started.execution_number, started.version_number) == (2, 2)
        assert device.describe("ota-r").execution.execution_number == 2
        device.update("ota-r", "SUCCEEDED", expected_version=2)
        assert device.next_event().execution is None
        job = api.get("/api/v1/jobs/ota-r").json()
        assert job["status"] == "COMPLETED" and job["retry"] == retry
        (execution,) = job["executions"]
        assert (execution["status"], execution["execution_number"]) == ("SUCCEEDED", 2)
        assert execution["retry_attempt"] == 1
        assert execution["retries"] == {"FAILED": 1, "TIMED_OUT": 0}

        # Timed out within its retries: queued again by Celery beat's upkeep.
        create_job(
            api,
            "ota-t",
            thing,
            timeout_minutes=1,
            retry={"criteria": [{"failure_type": "ALL", "number_of_retries": 1}]},
        )
        assert device.next_event().execution.job_id == "ota-t"
        device.start_next()
        assert jobs_time_out(timezone.now() + timedelta(minutes=2)) == 1
        back = device.next_event().execution
        assert (back.job_id, back.status, back.execution_number) == ("ota-t", "QUEUED", 2)
        device.start_next()
        device.update("ota-t", "FAILED")  # ALL's one retry is spent: it stays FAILED
        assert device.next_event().execution is None
        assert device.describe("ota-t").execution.status == "FAILED"
        detail = api.get("/api/v1/jobs/ota-t").json()["executions"][0]
        assert detail["retries"] == {"FAILED": 0, "TIMED_OUT": 1}
        # AWS bills each execution, a retry being one: 2 jobs, 2 retries.
        metered = JobMeter.objects.filter(tenant=fleet.tenant).values_list("executions", flat=True)
        assert sum(metered) == 4
    finally:
        device.close()

"""AWS's jobs topics and execution transitions (`common.jobs`), without a broker: the topics
that map to an API and those that do not, and each refusal AWS documents for an update."""

from __future__ import annotations

import pytest

from common.jobs import executions as ex
from common.jobs.topics import DESCRIBE, GET_PENDING, START_NEXT, JobTopic, parse


def test_topics_map_to_aws_apis_and_nothing_else():
    assert parse("$aws/things/t/jobs/get") == JobTopic("t", GET_PENDING)
    assert parse("$aws/things/t/jobs/start-next/accepted") == JobTopic(
        "t", START_NEXT, "", "accepted"
    )
    assert parse("$aws/things/t/jobs/$next/get") == JobTopic("t", DESCRIBE, "$next")
    assert parse("$aws/things/t/jobs/get/get") == JobTopic("t", DESCRIBE, "get")  # a job "get"
    assert parse("$aws/things/t/jobs/fw-1/update/rejected").reply == "rejected"
    assert parse("$aws/things/t/jobs/fw-1/update").request_topic == "$aws/things/t/jobs/fw-1/update"
    assert not parse("$aws/things/t/jobs/notify").is_request  # the service's alone
    for topic in (
        "$aws/things/t/jobs/$next/update",  # $next only describes
        "$aws/things/t/jobs/fw 1/get",
        "$aws/things/t/jobs/fw-1/delete",
        "$aws/things/t/jobs/fw-1/update/delta",
        "$aws/things/t/shadow/get",
        "$aws/things//jobs/get",
    ):
        assert parse(topic) is None, topic


def queued(**fields) -> ex.Execution:
    return ex.Execution("fw-1", "t", ex.QUEUED, {}, 100, 100, **fields)


def refusal(execution, **request) -> ex.JobError:
    with pytest.raises(ex.JobError) as caught:
        ex.update(execution, ex.Request(**request), 200)
    return caught.value


def test_transitions_as_aws():
    running = ex.start(queued(job_timeout_minutes=10), ex.Request(), 150)
    assert (running.status, running.version_number, running.started_at) == (ex.IN_PROGRESS, 2, 150)
    assert running.timeout_at == 150 + 600
    stepped = ex.update(running, ex.Request(status=ex.IN_PROGRESS, step_timeout=2), 160)
    assert stepped.timeout_at == 160 + 120  # the step timer, sooner than the job's
    done = ex.update(stepped, ex.Request(status=ex.SUCCEEDED, status_details={"a": "b"}), 170)
    assert (done.status, done.version_number, done.timeout_at) == (ex.SUCCEEDED, 4, None)
    assert ex.update(queued(), ex.Request(status=ex.REJECTED), 110).status == ex.REJECTED

    assert refusal(running, status=ex.FAILED, expected_version=1).code == ex.VERSION_MISMATCH
    assert refusal(done, status=ex.IN_PROGRESS).code == ex.INVALID_STATE_TRANSITION
    assert refusal(done, status=ex.IN_PROGRESS).execution is done  # executionState rides along
    timed_out = ex.ended(running, ex.TIMED_OUT, 900)
    assert refusal(timed_out, status=ex.SUCCEEDED).code == ex.TERMINAL_STATE_REACHED
    assert refusal(running, status=ex.QUEUED).code == ex.INVALID_REQUEST
    assert refusal(running).code == ex.INVALID_REQUEST  # status is required
    assert refusal(running, status=ex.FAILED, execution_number=2).code == ex.RESOURCE_NOT_FOUND


@pytest.mark.parametrize(
    "payload, code",
    [
        (b"{nope", ex.INVALID_JSON),
        (b"[1]", ex.INVALID_JSON),
        (b'{"status": "DONE"}', ex.INVALID_REQUEST),
        (b'{"statusDetails": {"a": 1}}', ex.INVALID_REQUEST),
        (b'{"expectedVersion": "2"}', ex.INVALID_REQUEST),
        (b'{"stepTimeoutInMinutes": 0}', ex.INVALID_REQUEST),
        (b'{"clientToken": 5}', ex.INVALID_REQUEST),
        (b'{"surprise": 1, "clientToken": "c"}', ex.INVALID_REQUEST),
        # What Postgres or a UTF-8 reply would refuse (an InternalError, or a traceback):
        (b'{"statusDetails": {"a": "x\\u0000"}, "status": "IN_PROGRESS"}', ex.INVALID_JSON),
        (b'{"clientToken": "\\ud800"}', ex.INVALID_JSON),
        (b'{"expectedVersion": NaN}', ex.INVALID_JSON),
        (b"[" * 20_000, ex.INVALID_JSON),
    ],
)
def test_malformed_requests_are_refused_with_aws_codes(payload, code):
    with pytest.raises(ex.JobError) as caught:
        ex.parse_request(payload)
    assert caught.value.code == code
    if b'"c"' in payload:
        assert caught.value.client_token == "c"  # echoed on …/rejected


def test_notifications_only_when_the_list_or_the_next_changes():
    first = queued()
    second = ex.Execution("fw-2", "t", ex.QUEUED, {}, 120, 120)
    started = ex.start(first, ex.Request(), 130)
    sent = ex.notifications("t", [first, second], [started, second], 130)
    assert [topic for topic, _ in sent] == ["$aws/things/t/jobs/notify"]  # the next is the same
    sent = dict(ex.notifications("t", [started, second], [second], 140))
    assert sent["$aws/things/t/jobs/notify-next"]["execution"]["jobId"] == "fw-2"
    assert sent["$aws/things/t/jobs/notify"]["jobs"] == {"QUEUED": [ex.summary(second)]}
    assert ex.notify_next_document(None, 5) == {"timestamp": 5}


def test_the_journey_says_the_jobs_service_took_a_request():
    from tenants.journey.words import outcome_reason

    row = {"outcome": "served", "topic": "$aws/things/t/jobs/start-next"}
    assert outcome_reason(row) == "taken by the jobs service"
    shadow = {"outcome": "served", "topic": "$aws/things/t/shadow/update"}
    assert "shadow service" in outcome_reason(shadow)


def test_retries_follow_the_criteria_and_make_a_new_execution():
    criteria = [{"failure_type": "FAILED", "number_of_retries": 2}]
    e = ex.Execution(
        "fw",
        "t",
        ex.FAILED,
        {"x": "y"},
        10,
        20,
        version_number=3,
        started_at=15,
        retry_criteria=criteria,
    )
    assert ex.retry_due(e)
    again = ex.retried(e, 30)
    assert (again.status, again.execution_number, again.version_number) == (ex.QUEUED, 2, 1)
    assert (again.queued_at, again.started_at, again.status_details) == (30, None, {})
    assert (again.failed_retries, again.timed_out_retries) == (1, 0)
    third = ex.retried(ex.ended(again, ex.FAILED, 40), 50)
    assert third.execution_number == 3 and not ex.retry_due(ex.ended(third, ex.FAILED, 60))
    # TIMED_OUT needs a TIMED_OUT or ALL criterion; ALL counts both kinds of retry.
    assert not ex.retry_due(ex.ended(e, ex.TIMED_OUT, 30))
    both = [{"failure_type": "ALL", "number_of_retries": 1}]
    timed = ex.ended(
        ex.Execution("fw", "t", ex.IN_PROGRESS, {}, 1, 1, retry_criteria=both), ex.TIMED_OUT, 2
    )
    assert ex.retry_due(timed) and not ex.retry_due(ex.ended(ex.retried(timed, 3), ex.FAILED, 4))
    assert not ex.retry_due(ex.Execution("fw", "t", ex.REJECTED, {}, 1, 1, retry_criteria=both))
    # The thing is told again: the next execution is another one, though of the same job.
    before = [ex.Execution("fw", "t", ex.IN_PROGRESS, {}, 1, 1)]
    told = dict(ex.notifications("t", before, [again], 30))
    assert told["$aws/things/t/jobs/notify-next"]["execution"]["executionNumber"] == 2
    assert "$aws/things/t/jobs/notify" in told

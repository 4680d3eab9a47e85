"""The Jobs service's reserved topics, inside a tenant's namespace (AWS's MQTT API for devices):

    $aws/things/{thing}/jobs/get                  GetPendingJobExecutions
    $aws/things/{thing}/jobs/start-next           StartNextPendingJobExecution
    $aws/things/{thing}/jobs/{jobId}/get          DescribeJobExecution (`$next`: the next one)
    $aws/things/{thing}/jobs/{jobId}/update       UpdateJobExecution
    …/accepted, …/rejected                        replies to the requester
    $aws/things/{thing}/jobs/notify               the pending list changed
    $aws/things/{thing}/jobs/notify-next          the next pending execution changed

Like the shadows' (`common.shadow.topics`), a thing's jobs topics are its device's own unless an
ACL rule names them (`common.access.acl`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "$aws/things/"
GET_PENDING, START_NEXT, DESCRIBE, UPDATE = "get", "start-next", "describe", "update"
NOTIFY, NOTIFY_NEXT = "notify", "notify-next"
ACCEPTED, REJECTED = "accepted", "rejected"
NEXT = "$next"  # DescribeJobExecution's job id for "the next pending one"
# AWS's job ids: letters, digits, `_` and `-`, at most 64.
JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True, slots=True)
class JobTopic:
    thing: str
    operation: str  # get | start-next | describe | update | notify | notify-next
    job_id: str = ""  # describe and update only
    reply: str = ""  # "": a request (or a notification); else accepted | rejected

    @property
    def request_topic(self) -> str:
        base = f"{PREFIX}{self.thing}/jobs"
        if self.operation in (DESCRIBE, UPDATE):
            verb = "get" if self.operation == DESCRIBE else UPDATE
            return f"{base}/{self.job_id}/{verb}"
        return f"{base}/{self.operation}"

    def reply_topic(self, reply: str) -> str:
        return f"{self.request_topic}/{reply}"

    @property
    def is_request(self) -> bool:
        return not self.reply and self.operation not in (NOTIFY, NOTIFY_NEXT)


def notify_topic(thing: str) -> str:
    return f"{PREFIX}{thing}/jobs/{NOTIFY}"


def notify_next_topic(thing: str) -> str:
    return f"{PREFIX}{thing}/jobs/{NOTIFY_NEXT}"


def parse(topic: str) -> JobTopic | None:
    """The jobs topic `topic` is, or None (not a jobs topic, or one that maps to no API)."""
    if not topic.startswith(PREFIX):
        return None
    levels = topic.split("/")
    if len(levels) < 5 or levels[3] != "jobs" or not levels[2]:
        return None
    thing, rest = levels[2], levels[4:]
    replies = (ACCEPTED, REJECTED)
    if rest[0] in (GET_PENDING, START_NEXT) and len(rest) <= 2:
        if len(rest) == 1:
            return JobTopic(thing, rest[0])
        if rest[1] in replies:
            return JobTopic(thing, rest[0], reply=rest[1])
    if rest in ([NOTIFY], [NOTIFY_NEXT]):
        return JobTopic(thing, rest[0])
    if 2 <= len(rest) <= 3 and rest[1] in ("get", UPDATE):
        job_id = rest[0]
        operation = DESCRIBE if rest[1] == "get" else UPDATE
        if not (JOB_ID.match(job_id) or (job_id == NEXT and operation == DESCRIBE)):
            return None
        if len(rest) == 2:
            return JobTopic(thing, operation, job_id)
        if rest[2] in replies:
            return JobTopic(thing, operation, job_id, rest[2])
    return None

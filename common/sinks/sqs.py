"""The SQS sink: each record one message (its output's JSON text as the body), sent with
SendMessageBatch, ten at a time (SQS's limit) and at most 256 KiB a call.

A FIFO queue (its URL ends in `.fifo`) gets `MessageGroupId` = the record's key, so messages of
one key arrive in order and keys do not hold each other up, and `MessageDeduplicationId` = the
record's outbox id, so a send retried within SQS's five-minute window is not delivered twice. A
key SQS does not take as a group id (over 128 characters, or characters outside printable
ASCII) is replaced by its SHA-256 in hex, the same for every message of that key.

SQS answers per message: a message it refused is that record's failure, the rest succeed. A
refusal SQS blames on the sender (`SenderFault`: a body it does not take, say) is permanent;
one on its side is retried. A whole call refused for one message's content (too long,
characters SQS does not take) is sent again a message a call, so only that message fails. The
queue's URL says where the queue is: with no `endpoint_url`, a
URL on a host that is not AWS's is used as the endpoint (an SQS-compatible service).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

from common.sinks.aws import Aws, error_code
from common.sinks.base import Record, Result, key_ordered, optional, setting

MAX_ENTRIES = 10  # SendMessageBatch's limit
MAX_CALL_BYTES = 256 << 10
# A whole call refused for what one message holds (too long, characters SQS does not take):
# sent again one message a call, so only that message fails (permanently).
REFUSED_CONTENT = ("InvalidParameterValue", "InvalidMessageContents", "BatchRequestTooLong")


def group_id(key: str) -> str:
    """A FIFO queue's MessageGroupId for a key (see the module's docstring)."""
    if key and len(key) <= 128 and all(33 <= ord(c) <= 126 for c in key):
        return key
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def _chunks(records: Sequence[Record]) -> Iterator[list[int]]:
    chunk: list[int] = []
    size = 0
    for index, record in enumerate(records):
        length = len(record.body.encode("utf-8", "surrogatepass"))
        if chunk and (len(chunk) == MAX_ENTRIES or size + length > MAX_CALL_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(index)
        size += length
    if chunk:
        yield chunk


class SqsWriter:
    def __init__(self, action: dict[str, Any], tenant: str) -> None:
        self.queue_url = setting(action, "queue_url")
        parts = urlsplit(self.queue_url)
        host = (parts.hostname or "").lower()
        if parts.scheme not in ("http", "https") or not host:
            raise ValueError(f"'{self.queue_url}' is not a queue URL")
        endpoint = optional(action, "endpoint_url")
        settings = dict(action)
        if endpoint is None and host.endswith((".amazonaws.com", ".amazonaws.com.cn")):
            labels = host.split(".")  # sqs.<region>.amazonaws.com
            if not optional(action, "region") and len(labels) > 3 and labels[0] == "sqs":
                settings["region"] = labels[1]
        elif endpoint is None:
            endpoint = f"{parts.scheme}://{parts.netloc}"
        self.fifo = parts.path.rstrip("/").endswith(".fifo")
        self.aws = Aws("sqs", settings, endpoint)
        self.tenant = tenant
        self._refused = {
            "AWS.SimpleQueueService.NonExistentQueue": f"the queue '{self.queue_url}' does not exist",
            "QueueDoesNotExist": f"the queue '{self.queue_url}' does not exist",
        }

    def _entry(self, position: int, record: Record) -> dict[str, str]:
        entry = {"Id": str(position), "MessageBody": record.body}
        if self.fifo:
            entry["MessageGroupId"] = group_id(record.key)
            entry["MessageDeduplicationId"] = str(record.id)
        return entry

    def send(self, records: Sequence[Record]) -> list[Result]:
        send = lambda chunk, results: self._send(records, chunk, results)  # noqa: E731
        return key_ordered(records, _chunks(records), send, lambda r: group_id(r.key))

    def _send(self, records: Sequence[Record], chunk: list[int], results: list[Result]) -> None:
        entries = [self._entry(n, records[i]) for n, i in enumerate(chunk)]
        try:
            answer = self.aws.client().send_message_batch(QueueUrl=self.queue_url, Entries=entries)
        except Exception as exc:
            if error_code(exc) in REFUSED_CONTENT and len(chunk) > 1:
                for i in chunk:  # one message the queue refuses must not fail the others
                    self._send(records, [i], results)
                return
            refusal = Result(
                False,
                f"SQS: {self.aws.words(exc, self._refused)}",
                retry=error_code(exc) not in REFUSED_CONTENT,
            )
            for i in chunk:
                results[i] = refusal
            return
        refused = answer.get("Failed") or []
        for failure in refused:
            code = str(failure.get("Code", "")).strip()
            message = str(failure.get("Message", "")).strip()
            why = f"{code}: {message}" if message else code or "no reason given"
            error = f"SQS: the queue refused {len(refused)} of {len(entries)} messages ({why})"
            results[chunk[int(failure["Id"])]] = Result(
                False, self.aws.scrub(error), retry=not failure.get("SenderFault", False)
            )

    def check(self) -> str | None:
        """The queue exists and the credentials may read its attributes. (SQS has no dry-run
        send: a test message would reach the tenant's consumers.)"""
        try:
            self.aws.client().get_queue_attributes(
                QueueUrl=self.queue_url, AttributeNames=["QueueArn"]
            )
        except Exception as exc:
            return f"SQS: {self.aws.words(exc, self._refused)}"
        return None

    def close(self) -> None:
        self.aws.close()

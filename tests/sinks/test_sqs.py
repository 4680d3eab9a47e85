"""The SQS sink against moto's SQS: a batch received once; a FIFO queue's group and
deduplication ids; a message the queue refuses fails alone; a queue not there, in words."""

from __future__ import annotations

import hashlib
import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from common.sinks import check_action, writer_for
from tests.sinks.conftest import record


def _receive(sqs, url: str, attributes: bool = False) -> list[dict]:
    got: list[dict] = []
    while True:
        answer = sqs.receive_message(
            QueueUrl=url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=0,
            MessageSystemAttributeNames=["All"] if attributes else [],
        )
        batch = answer.get("Messages", [])
        if not batch:
            return got
        got.extend(batch)
        for message in batch:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def test_a_batch_arrives_once_each_output_a_message(aws, boto):
    sqs = boto("sqs")
    url = sqs.create_queue(QueueName=f"q-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    records = [record(i, {"n": i, "text": "ü" * 50}) for i in range(1, 26)]
    writer = writer_for({"type": "sqs", "queue_url": url, **aws}, "acme")
    results = writer.send(records)
    writer.close()
    assert [r.ok for r in results] == [True] * 25  # 3 calls of at most 10
    bodies = [m["Body"] for m in _receive(sqs, url)]
    assert sorted(bodies, key=lambda b: json.loads(b)["n"]) == [r.body for r in records]


def test_a_fifo_queue_groups_by_key_and_drops_a_resent_outbox_id(aws, boto):
    sqs = boto("sqs")
    url = sqs.create_queue(
        QueueName=f"q-{uuid.uuid4().hex[:8]}.fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    records = [
        record(1, {"n": 1}, key="acme/pump-1"),
        record(2, {"n": 2}, key="pump 2 ✓"),  # not a group id SQS takes: its digest
        record(3, {"n": 3}, key="acme/pump-1"),
    ]
    writer = writer_for({"type": "sqs", "queue_url": url, **aws}, "acme")
    assert all(r.ok for r in writer.send(records))
    assert all(r.ok for r in writer.send(records[:2]))  # a retry of what was sent
    writer.close()
    got = _receive(sqs, url, attributes=True)
    seen = [
        (m["Body"], m["Attributes"]["MessageGroupId"], m["Attributes"]["MessageDeduplicationId"])
        for m in got
    ]
    digest = hashlib.sha256("pump 2 ✓".encode()).hexdigest()
    assert sorted(seen) == [  # each once, the second send dropped by its deduplication ids
        (records[0].body, "acme/pump-1", "1"),
        (records[1].body, digest, "2"),
        (records[2].body, "acme/pump-1", "3"),
    ]
    assert [b for b, g, _ in seen if g == "acme/pump-1"] == [records[0].body, records[2].body]


def test_a_message_the_queue_refuses_fails_alone_and_for_good(aws, boto):
    sqs = boto("sqs")
    url = sqs.create_queue(
        QueueName=f"q-{uuid.uuid4().hex[:8]}", Attributes={"MaximumMessageSize": "1024"}
    )["QueueUrl"]
    records = [record(1, {"n": 1}), record(2, {"big": "x" * 2000}), record(3, {"n": 3})]
    writer = writer_for({"type": "sqs", "queue_url": url, **aws}, "acme")
    results = writer.send(records)
    writer.close()
    assert [(r.ok, r.retry) for r in results] == [(True, True), (False, False), (True, True)]
    assert results[1].error is not None and "shorter than 1024 bytes" in results[1].error
    assert sorted(m["Body"] for m in _receive(sqs, url)) == [records[0].body, records[2].body]


def test_a_queue_that_is_not_there_fails_every_record_to_retry_in_words(aws, boto):
    sqs = boto("sqs")
    url = sqs.create_queue(QueueName=f"q-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    missing = url.rsplit("/", 1)[0] + "/nope"
    action = {"type": "sqs", "queue_url": missing, **aws}
    results = writer_for(action, "acme").send([record(1, {}), record(2, {})])
    assert [(r.ok, r.retry) for r in results] == [(False, True)] * 2
    assert results[0].error == f"SQS: the queue '{missing}' does not exist"
    assert check_action(action, "acme") == results[0].error
    assert check_action({**action, "queue_url": url}, "acme") is None
    # No endpoint_url: the queue's URL (not AWS's) says where the queue is.
    bare = {k: v for k, v in action.items() if k != "endpoint_url"}
    assert check_action({**bare, "queue_url": url}, "acme") is None


def _busy_far_end() -> tuple[ThreadingHTTPServer, list[str]]:
    """An SQS endpoint that answers every request 503, and the requests' bodies."""
    seen: list[str] = []

    class Busy(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode())
            self.send_response(503)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, seen


def test_a_keys_later_outputs_wait_behind_its_failed_one():
    """Twelve outputs of one device and one of another, in two requests: the first fails, so
    the device's two in the second are not sent ahead of it (the other device's is)."""
    server, seen = _busy_far_end()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        action = {
            "type": "sqs",
            "queue_url": f"{endpoint}/123456789012/q",
            "endpoint_url": endpoint,
        }
        writer = writer_for(action, "acme")
        records = [record(i, {"n": i}, key="pump-1") for i in range(1, 13)]
        records.append(record(13, {"n": 13}, key="pump-2"))
        results = writer.send(records)
        writer.close()
        assert not any(r.ok for r in results) and all(r.retry for r in results)
        assert len(seen) == 2  # the first ten, then pump-2's alone
        second = [json.loads(e["MessageBody"]) for e in json.loads(seen[1])["Entries"]]
        assert second == [{"n": 13}]
        assert {r.error for r in results[10:12]} == {results[0].error}  # in its words
    finally:
        server.shutdown()


def test_an_attempt_is_one_request_even_when_the_far_end_fails_it():
    """The outbox retries, counted as resent; botocore's own retry would add copies nobody
    counts (an independent probe found two requests per attempt, 38 uncounted duplicates)."""
    server, seen = _busy_far_end()
    try:
        endpoint = f"http://127.0.0.1:{server.server_address[1]}"
        action = {
            "type": "sqs",
            "queue_url": f"{endpoint}/123456789012/q",
            "endpoint_url": endpoint,
        }
        writer = writer_for(action, "acme")
        results = writer.send([record(1, {"n": 1}), record(2, {"n": 2})])
        writer.close()
        assert [r.ok for r in results] == [False, False]
        assert len(seen) == 1  # one batch call, no retry inside the client
    finally:
        server.shutdown()

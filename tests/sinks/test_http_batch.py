"""The HTTP batch sink against a local receiver: one POST of the outputs as a JSON array,
signed as webhooks are; the receiver's answer decides (2xx ok, 429/5xx retry, 4xx for good);
the receiver down or not allowed, in words."""

from __future__ import annotations

import hashlib
import hmac
import json

from common.sinks import check_action, writer_for
from tests.sinks.conftest import Receiver, free_port, record


def test_one_signed_post_carries_the_batch_in_order(receiver):
    records = [record(3, {"n": 1, "s": "é"}), record(4, {"n": 2}), record(9, {"n": [3]})]
    action = {"type": "http_batch", "url": receiver.url, "secret": "s3cret"}
    results = writer_for(action, "acme").send(records)
    assert [(r.ok, r.error) for r in results] == [(True, None)] * 3
    [call] = receiver.calls
    assert json.loads(call["body"]) == [{"n": 1, "s": "é"}, {"n": 2}, {"n": [3]}]
    assert call["body"] == ("[" + ",".join(r.body for r in records) + "]").encode()
    signature = hmac.new(b"s3cret", call["body"], hashlib.sha256).hexdigest()
    assert call["headers"]["X-Signature-256"] == f"sha256={signature}"
    assert call["headers"]["X-Batch-Id"] == "3-9"
    assert call["headers"]["Content-Type"] == "application/json"


def test_the_receivers_answer_decides_retry_or_not():
    receiver = Receiver(statuses=[503, 429, 400, 302])
    try:
        writer = writer_for({"type": "http_batch", "url": receiver.url}, "acme")
        answers = [writer.send([record(1, {}), record(2, {})]) for _ in range(4)]
        assert len(receiver.calls) == 4  # one request a send, no retry inside
    finally:
        receiver.close()
    assert [[(r.ok, r.retry, r.error) for r in results][0] for results in answers] == [
        (False, True, "HTTP batch: HTTP 503"),
        (False, True, "HTTP batch: HTTP 429"),
        (False, False, "HTTP batch: HTTP 400"),
        (False, False, "HTTP batch: HTTP 302 (redirects are not followed)"),
    ]
    assert all(len(set(results)) == 1 for results in answers)  # the batch's answer, each


def test_a_receiver_down_or_not_allowed_is_words_to_retry(receiver, monkeypatch):
    down = {"type": "http_batch", "url": f"http://127.0.0.1:{free_port()}/x"}
    [result] = writer_for(down, "acme").send([record(1, {})])
    assert (result.ok, result.retry, result.error) == (
        False,
        True,
        "HTTP batch: connection refused",
    )
    assert check_action(down, "acme") == "HTTP batch: connection refused"
    assert check_action({"type": "http_batch", "url": receiver.url}, "acme") is None
    assert json.loads(receiver.calls[-1]["body"]) == []  # the check: an empty batch
    monkeypatch.delenv("WEBHOOK_ALLOW")
    [result] = writer_for({"type": "http_batch", "url": receiver.url}, "acme").send([record(1, {})])
    assert (result.ok, result.retry) == (False, True)
    assert "sinks connect to public addresses only" in str(result.error)
    assert check_action({"type": "http_batch", "url": "ftp://x/y"}, "acme") == (
        "'ftp://x/y' is not an http(s) URL"
    )

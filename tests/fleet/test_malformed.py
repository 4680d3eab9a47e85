"""Malformed provisioning requests (issue 44, point 5): a claim's hostile payloads — NaN, NUL,
lone surrogates, nesting deeper than the parser recurses, no JSON — are each answered on the
request's `…/rejected` topic with AWS's `{statusCode, errorCode, errorMessage}` naming the
problem; the connection goes on and the broker logs no traceback."""

from __future__ import annotations

import json

import pytest

from tests.fleet.test_attacker import CREATE, claimer, provision

pytestmark = pytest.mark.django_db(transaction=True)

HOSTILE = [
    (b'{"parameters": {"SerialNumber": NaN}}', "NaN and Infinity are not JSON numbers"),
    (b'{"parameters": {"SerialNumber": "a\\u0000"}}', "NUL"),
    (b'{"certificateOwnershipToken": "\\ud800"}', "surrogate"),
    (b'{"parameters": ' + b'{"a":' * 1500 + b"1" + b"}" * 1501, "nested more than"),
    (b"[" * 10_000, "nested more than"),
]


@pytest.mark.parametrize("request_topic", ["create", "provision"])
@pytest.mark.parametrize(("payload", "words"), HOSTILE)
def test_hostile_payloads_are_rejected_in_words(tls_broker, claim, request_topic, payload, words):
    """A connection a request: a claim's connection is sometimes lost ~0.1 s after a reply,
    whatever the request (valid ones too, on the code before this test as well); that is
    another matter than these payloads' answers."""
    topic = CREATE if request_topic == "create" else provision(claim)
    client = claimer(tls_broker, claim)
    try:
        assert client.subscribe(topic + "/+", 1)[0] < 0x80
        client.publish(topic, payload, 1)
        replies = client.expect(1, 5)
        assert replies, payload[:60]
        body = json.loads(replies[0].payload)
        assert replies[0].topic == f"{topic}/rejected"
        assert (body["statusCode"], body["errorCode"]) == (400, "InvalidPayload"), body
        assert words in body["errorMessage"]
    finally:
        client.close()
    assert "Traceback" not in (tls_broker.folder / "broker.log").read_text()

"""Malformed requests on the shadow and jobs topics, fuzzed against a real broker on Postgres
(issue 44, point 5): whatever the payload — JSON with `NaN`, NUL, lone surrogates, deep nesting,
odd client tokens, or no JSON at all — the device stays connected, each request is answered on
its `…/accepted` or `…/rejected` topic (AWS's error document when refused, never a 500), and the
broker logs no traceback. Bounded: a fixed number of examples, no shrinking deadline."""

from __future__ import annotations

import json
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.broker.clients import Paho
from tests.shadows.conftest import make_fleet

pytestmark = pytest.mark.django_db(transaction=True)

DEVICE = "fz"
TOPICS = [
    f"$aws/things/{DEVICE}/shadow/update",
    f"$aws/things/{DEVICE}/shadow/get",
    f"$aws/things/{DEVICE}/shadow/name/cfg/update",
    f"$aws/things/{DEVICE}/shadow/delete",
    f"$aws/things/{DEVICE}/jobs/get",
    f"$aws/things/{DEVICE}/jobs/start-next",
    f"$aws/things/{DEVICE}/jobs/$next/get",
    f"$aws/things/{DEVICE}/jobs/job-1/update",
    f"$aws/things/{DEVICE}/jobs/job-1/get",
]
# Strings that JSON's escapes can carry and a store or a UTF-8 encoder cannot.
NASTY_TEXT = st.sampled_from(["\\u0000", "\\ud800", "\\udfff", "a\\u0000b", "\\ud83d", "é", ""])
NASTY_NUMBER = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-0", "1", "null"])


def _json_text(depth: int):
    """Text of JSON-ish values (as a hostile client writes it, not as `json.dumps` would)."""
    leaf = st.one_of(
        NASTY_NUMBER,
        NASTY_TEXT.map(lambda s: f'"{s}"'),
        st.text(max_size=8).map(json.dumps),
        st.booleans().map(lambda b: "true" if b else "false"),
    )
    if depth == 0:
        return leaf
    inner = _json_text(depth - 1)
    return st.one_of(
        leaf,
        st.lists(inner, max_size=3).map(lambda xs: "[" + ",".join(xs) + "]"),
        st.dictionaries(NASTY_TEXT | st.text(max_size=4), inner, max_size=3).map(
            lambda d: "{" + ",".join(f'"{k}":{v}' for k, v in d.items()) + "}"
        ),
    )


@st.composite
def payloads(draw) -> bytes:
    kind = draw(st.integers(0, 5))
    if kind == 0:  # a request document with hostile parts
        token = draw(st.one_of(st.none(), NASTY_TEXT, st.text(max_size=70)))
        section = draw(st.sampled_from(["desired", "reported", "delta"]))
        fields = [f'"state":{{"{section}":{draw(_json_text(3))}}}']
        if token is not None:  # NASTY_TEXT's escapes go as written, other text as JSON
            written = f'"{token}"' if "\\" in token else json.dumps(token)
            fields.append(f'"clientToken":{written}')
        if draw(st.booleans()):
            fields.append(f'"version":{draw(NASTY_NUMBER)}')
        return ("{" + ",".join(fields) + "}").encode()
    if kind == 1:  # jobs fields, hostile
        details = draw(_json_text(2))
        status = draw(st.sampled_from(['"IN_PROGRESS"', '"SUCCEEDED"', "NaN", '"\\u0000"']))
        version = draw(NASTY_NUMBER)
        body = f'{{"status":{status},"statusDetails":{details},"expectedVersion":{version}}}'
        return body.encode()
    if kind == 2:  # nesting far deeper than the parser recurses
        depth = draw(st.integers(5, 3000))
        opener = draw(st.sampled_from([b"[", b'{"a":']))
        return b'{"state":{"desired":' + opener * depth
    if kind == 3:
        return draw(st.binary(max_size=64))
    if kind == 4:
        return draw(_json_text(4)).encode()
    return b'{"clientToken":"' + draw(NASTY_TEXT).encode() + b'"}'


@pytest.fixture
def device(tls_broker, tmp_path):
    fleet = make_fleet(tmp_path, "fz")
    fleet.device(DEVICE)
    client = Paho(tls_broker.port, f"{fleet.slug}/{DEVICE}", fleet.secrets[DEVICE], DEVICE)
    for level in ("shadow", "jobs"):
        client.subscribe(f"$aws/things/{DEVICE}/{level}/#", 1)
    yield client
    client.close()


def _answer(client: Paho, topic: str, timeout: float = 5.0) -> dict | None:
    """The body on `topic`'s accepted or rejected topic (skipping deltas, documents, notices)."""
    deadline = time.monotonic() + timeout
    while (remaining := deadline - time.monotonic()) > 0:
        for message in client.expect(1, remaining):
            if message.topic in (f"{topic}/accepted", f"{topic}/rejected"):
                return {"outcome": message.topic.rsplit("/", 1)[1], **json.loads(message.payload)}
    return None


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(topic=st.sampled_from(TOPICS), payload=payloads())
def test_malformed_requests_are_answered_never_dropped(tls_broker, device, topic, payload):
    device.publish(topic, payload, 1)
    answer = _answer(device, topic)
    assert not device.disconnected.is_set(), (device.disconnect_reason, topic, payload[:200])
    assert answer is not None, (topic, payload[:200])
    if answer["outcome"] == "rejected":
        code = answer.get("code")
        assert code not in (500, "InternalError"), (topic, payload[:200], answer)
        assert answer.get("message"), answer
    assert "Traceback" not in (tls_broker.folder / "broker.log").read_text()


def test_a_reply_topic_too_long_to_write_is_refused_not_a_disconnect(tls_broker, device):
    """A request topic so long that its reply topic could not be written (MQTT: 65,535 bytes)
    is refused (PUBACK 0x87 on MQTT 5), and the connection goes on."""
    acks: dict[int, int] = {}
    device.client.on_publish = lambda c, u, mid, rc, props: acks.__setitem__(mid, rc.value)
    for topic in (
        f"$aws/things/{DEVICE}/jobs/" + "x" * 65_000,
        f"$aws/things/{DEVICE}/jobs/job-1/" + "y" * 65_000,
        f"$aws/things/{DEVICE}/shadow/" + "z" * 65_000,
    ):
        info = device.publish(topic, b"{}", 1)
        deadline = time.monotonic() + 5
        while info.mid not in acks and time.monotonic() < deadline:
            time.sleep(0.01)
        assert acks.get(info.mid, 0) >= 0x80, topic[:60]
    assert not device.disconnected.is_set()
    device.publish(f"$aws/things/{DEVICE}/shadow/get", b"{}", 1)
    assert _answer(device, f"$aws/things/{DEVICE}/shadow/get") is not None
    assert "Traceback" not in (tls_broker.folder / "broker.log").read_text()

"""The MQTT bridge against Mosquitto: a batch read by a subscriber there, in order, on the
templated topics; a topic the far end's ACL refuses fails alone; the broker stopped fails the
send in words, and once it is back the same writer's client has reconnected by itself."""

from __future__ import annotations

import queue
import time

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from common.sinks import check_action, writer_for
from tests.sinks.conftest import free_port, record


@pytest.fixture
def subscriber(mosquitto):
    got: queue.Queue[tuple[str, bytes, int]] = queue.Queue()
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="far-end-reader")
    client.on_message = lambda _c, _u, m: got.put((m.topic, m.payload, m.qos))
    client.connect("127.0.0.1", mosquitto.port)
    client.subscribe("#", qos=1)
    client.loop_start()
    time.sleep(0.2)  # the SUBACK
    yield got
    client.disconnect()
    client.loop_stop()


def _drain(got: queue.Queue, count: int) -> list[tuple[str, bytes, int]]:
    return [got.get(timeout=5) for _ in range(count)]


def _action(mosquitto, **more) -> dict:
    return {"type": "mqtt_bridge", "host": "127.0.0.1", "port": mosquitto.port,
            "topic": "ok/${clientid}/temp", **more}  # fmt: skip


def test_a_batch_arrives_in_order_on_its_topics_at_qos_1(mosquitto, subscriber):
    records = [record(i, {"clientid": f"pump-{i % 3}", "n": i}) for i in range(1, 151)]
    writer = writer_for(_action(mosquitto), "acme")
    results = writer.send(records)  # 150 through a window of 64
    writer.close()
    assert [r.ok for r in results] == [True] * 150
    got = _drain(subscriber, 150)
    assert got == [
        (f"ok/pump-{i % 3}/temp", records[i - 1].body.encode(), 1) for i in range(1, 151)
    ]
    assert subscriber.empty()


def test_a_topic_the_far_end_refuses_or_no_topic_at_all_fails_alone(mosquitto, subscriber):
    writer = writer_for({**_action(mosquitto), "topic": "${where}/${clientid}"}, "acme")
    results = writer.send(
        [
            record(1, {"where": "ok", "clientid": "a"}),
            record(2, {"where": "secret", "clientid": "b"}),  # the far end's ACL: not under ok/
            record(3, {"where": "ok", "clientid": "+"}),  # a wildcard: no topic to publish to
            record(4, {"where": "ok", "clientid": "c"}),
        ]
    )
    writer.close()
    assert [(r.ok, r.retry) for r in results] == [
        (True, True), (False, False), (False, False), (True, True)
    ]  # fmt: skip
    assert results[1].error == "MQTT bridge: the broker refused the message: Not authorized"
    assert results[2].error == "MQTT bridge: the topic 'ok/+' has a wildcard (+ or #)"
    assert [t for t, _, _ in _drain(subscriber, 2)] == ["ok/a", "ok/c"]
    time.sleep(0.2)
    assert subscriber.empty()


def test_the_far_end_down_then_back_the_writer_reconnects_itself(mosquitto, subscriber):
    writer = writer_for(_action(mosquitto), "acme")
    writer.connect_wait = 1.0  # type: ignore[attr-defined]
    try:
        assert writer.send([record(1, {"clientid": "p", "n": 1})])[0].ok
        mosquitto.stop()
        results = writer.send([record(2, {"clientid": "p", "n": 2})])
        assert [(r.ok, r.retry) for r in results] == [(False, True)]
        assert results[0].error in (
            "MQTT bridge: connection refused",
            "MQTT bridge: the connection to the broker was lost",
        )
        mosquitto.start()
        writer.connect_wait = 5.0  # type: ignore[attr-defined]
        assert writer.send([record(2, {"clientid": "p", "n": 2})])[0].ok  # the outbox's retry
    finally:
        writer.close()


def test_check_says_reachable_or_why_not(mosquitto):
    assert check_action(_action(mosquitto), "acme") is None
    closed = {**_action(mosquitto), "port": free_port()}
    writer = writer_for(closed, "acme")
    writer.connect_wait = 1.0  # type: ignore[attr-defined]
    assert writer.check() == "MQTT bridge: connection refused"
    writer.close()
    assert check_action({**closed, "qos": 3}, "acme") == "the bridge's 'qos' is 0, 1 or 2"


def test_tls_checks_the_brokers_certificate(tls_mosquitto, monkeypatch):
    broker, cert = tls_mosquitto
    action = {**_action(broker), "tls": True}
    writer = writer_for(action, "acme")
    writer.connect_wait = 1.0  # type: ignore[attr-defined]
    words = writer.check()
    writer.close()
    assert words is not None
    assert words.startswith("MQTT bridge: TLS: the broker's certificate is not trusted")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # trusted as the system's CAs would be
    writer = writer_for(action, "acme")
    try:
        assert writer.check() is None
        assert writer.send([record(1, {"clientid": "t"})])[0].ok
    finally:
        writer.close()

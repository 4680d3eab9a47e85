"""Nothing acknowledged is lost: persistent sessions survive a kill -9 of the broker."""

import os
import signal
import threading
import time

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def devices():
    tenant = tenant_services.tenant_create("acme")
    # paho counts a refused (0x97) PUBACK as published: keep the rate quota out of the way.
    tenant_services.tenant_set_quota(tenant, {"max_publish_rate": 1_000_000})
    _, sub_secret = device_services.device_create(tenant=tenant, name="sub", client_id_policy="any")
    _, pub_secret = device_services.device_create(tenant=tenant, name="pub", client_id_policy="any")
    return sub_secret, pub_secret


def kill9(process) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def test_kill_9_mid_stream_loses_no_acknowledged_message(devices):
    sub_secret, pub_secret = devices
    process, port = start_pg_broker()
    try:
        sub = Paho(port, "acme/sub", sub_secret, "durable-sub", clean=False, expiry=3600)
        sub.subscribe("d/#", 1)
        sub.close()  # offline: everything goes to its durable queue
        pub = Paho(port, "acme/pub", pub_secret, "durable-pub")
        acked: list[str] = []
        stop = threading.Event()

        def publish_until_killed():
            for i in range(100_000):
                if stop.is_set():
                    return
                info = pub.client.publish("d/t", f"m{i}", 1)
                try:
                    info.wait_for_publish(2)
                except (RuntimeError, ValueError):
                    return
                if info.is_published():
                    acked.append(f"m{i}")
                else:
                    return

        worker = threading.Thread(target=publish_until_killed)
        worker.start()
        deadline = time.monotonic() + 20
        while len(acked) < 300 and time.monotonic() < deadline:
            time.sleep(0.01)
        kill9(process)  # mid-stream, with writes in flight
        stop.set()
        worker.join(10)
        pub.stop_loop()
        assert len(acked) >= 300
    finally:
        if process.poll() is None:
            kill9(process)

    process, port = start_pg_broker()
    try:
        back = Paho(port, "acme/sub", sub_secret, "durable-sub", clean=False, expiry=3600)
        assert back.session_present
        received = [m.payload.decode() for m in back.expect(len(acked) + 50, 10)]
        missing = set(acked) - set(received)
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:5]}"
        order = [int(p[1:]) for p in received]
        assert order == sorted(order)  # the queue keeps publish order
        # The subscription itself survived the crash too: new messages still queue up.
        back.close()
        pub = Paho(port, "acme/pub", pub_secret, "durable-pub-2")
        pub.publish("d/t", "after-restart", 1)
        pub.close()
        again = Paho(port, "acme/sub", sub_secret, "durable-sub", clean=False, expiry=3600)
        assert [m.payload for m in again.expect(1, 5)] == [b"after-restart"]
        again.close()
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_clean_start_discards_the_durable_session(devices):
    sub_secret, pub_secret = devices
    process, port = start_pg_broker()
    try:
        sub = Paho(port, "acme/sub", sub_secret, "short-lived", clean=False, expiry=3600)
        sub.subscribe("c/#", 1)
        sub.close()
        pub = Paho(port, "acme/pub", pub_secret, "c-pub")
        pub.publish("c/t", "queued", 1)
        pub.close()
        fresh = Paho(port, "acme/sub", sub_secret, "short-lived", clean=True, expiry=0)
        assert not fresh.session_present
        assert fresh.nothing(0.5)
        fresh.close()
    finally:
        process.terminate()
        process.wait(timeout=15)
    process, port = start_pg_broker()
    try:
        back = Paho(port, "acme/sub", sub_secret, "short-lived", clean=False, expiry=3600)
        assert not back.session_present  # nothing came back from the database either
        back.close()
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_retained_and_delayed_survive_a_restart(devices):
    sub_secret, pub_secret = devices
    process, port = start_pg_broker()
    try:
        # Waits for the delayed message in a persistent session: however long the restart takes,
        # the message reaches it (a fresh subscriber could come after it went out).
        waiting = Paho(port, "acme/sub", sub_secret, "rd-late", clean=False, expiry=3600)
        waiting.subscribe("r/later", 1)
        waiting.close()
        pub = Paho(port, "acme/pub", pub_secret, "rd-pub")
        pub.publish("r/kept", "retained value", 1, retain=True)
        pub.publish("r/gone", "temporary", 1, retain=True)
        pub.publish("r/gone", "", 1, retain=True)  # cleared
        published = time.monotonic()
        pub.publish("$delayed/3/r/later", "delayed value", 1)  # acknowledged once stored
        pub.close()
        time.sleep(0.5)
    finally:
        kill9(process)
    process, port = start_pg_broker()
    try:
        sub = Paho(port, "acme/sub", sub_secret, "rd-sub")
        sub.subscribe("r/kept", 1)
        sub.subscribe("r/gone", 1)
        first = sub.expect(1, 3)
        assert [(m.topic, m.payload, m.retain) for m in first] == [
            ("r/kept", b"retained value", True)
        ]
        assert sub.nothing(0.3)  # the cleared one stays cleared
        late = Paho(port, "acme/sub", sub_secret, "rd-late", clean=False, expiry=3600)
        later = late.expect(1, 8)
        assert [(m.topic, m.payload) for m in later] == [("r/later", b"delayed value")]
        assert time.monotonic() - published >= 3  # not before its time
        late.close()
        sub.close()
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_kill_9_keeps_qos_2_exactly_once(devices):
    """Both ends persistent, paho resending after the crash: every message arrives, none twice."""
    from tests.conftest import _free_port

    sub_secret, pub_secret = devices
    fixed = _free_port()  # the clients reconnect by themselves to the same address
    process, port = start_pg_broker("--port", str(fixed), "--no-archive")
    total = 1500
    try:
        sub = Paho(port, "acme/sub", sub_secret, "eo-sub", clean=False, expiry=3600)
        sub.subscribe("eo/#", 2)
        pub = Paho(port, "acme/pub", pub_secret, "eo-pub", clean=False, expiry=3600)
        for client in (sub, pub):
            client.client.reconnect_delay_set(0.2, 1)
        infos = [pub.client.publish("eo/t", f"m{i}", 2) for i in range(total)]
        deadline = time.monotonic() + 20
        while sum(i.is_published() for i in infos) < 300 and time.monotonic() < deadline:
            time.sleep(0.005)
        kill9(process)  # mid-stream: QoS 2 flows in both directions are half done
        completed_before = sum(i.is_published() for i in infos)
        assert 300 <= completed_before < total, completed_before
    finally:
        if process.poll() is None:
            kill9(process)

    process, port = start_pg_broker("--port", str(fixed), "--no-archive")
    try:
        deadline = time.monotonic() + 40
        while not all(i.is_published() for i in infos) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert all(i.is_published() for i in infos), "the publisher's resends did not complete"
        received = [m.payload.decode() for m in sub.expect(total + 20, 10)]
        duplicates = {p for p in received if received.count(p) > 1}
        assert not duplicates, f"delivered twice: {sorted(duplicates)[:5]}"
        assert set(received) == {f"m{i}" for i in range(total)}
        sub.client.disconnect()
        pub.client.disconnect()
    finally:
        process.terminate()
        process.wait(timeout=15)


def _will(topic: str, payload: str, delay: int = 0) -> tuple:
    properties = Properties(PacketTypes.WILLMESSAGE)
    if delay:
        properties.WillDelayInterval = delay
    return (topic, payload, 1, False, properties)


def test_wills_of_clients_connected_at_kill_9_go_out_after_restart(devices):
    sub_secret, pub_secret = devices
    process, port = start_pg_broker()
    try:
        watcher = Paho(port, "acme/sub", sub_secret, "watcher", clean=False, expiry=3600)
        watcher.subscribe("status/#", 1)
        watcher.close()  # offline: the wills must reach its durable queue
        lost = Paho(
            port,
            "acme/pub",
            pub_secret,
            "lost",
            clean=False,
            expiry=3600,
            will=_will("status/lost", "lost-offline"),
        )
        polite = Paho(
            port,
            "acme/pub",
            pub_secret,
            "polite",
            clean=False,
            expiry=3600,
            will=_will("status/polite", "polite-offline"),
        )
        polite.close()  # normal DISCONNECT: its will is discarded, before and after a crash
        patient = Paho(
            port,
            "acme/pub",
            pub_secret,
            "patient",
            clean=False,
            expiry=3600,
            will=_will("status/patient", "patient-offline", delay=5),
        )
        transient = Paho(
            port,
            "acme/pub",
            pub_secret,
            "transient",
            will=_will("status/transient", "transient-offline"),
        )
        kill9(process)
        for client in (lost, patient, transient):
            client.stop_loop()
    finally:
        if process.poll() is None:
            kill9(process)

    process, port = start_pg_broker()
    try:
        # Back within its will delay: the session resumes and its will is never published.
        back = Paho(port, "acme/pub", pub_secret, "patient", clean=False, expiry=3600)
        assert back.session_present
        watcher = Paho(port, "acme/sub", sub_secret, "watcher", clean=False, expiry=3600)
        got = [(m.topic, m.payload) for m in watcher.expect(1, 5)]
        assert got == [("status/lost", b"lost-offline")]
        # Only persistent sessions keep their will in Postgres; nothing else arrives.
        assert watcher.nothing(6)
        back.close()
        watcher.close()
    finally:
        process.terminate()
        process.wait(timeout=15)

    process, port = start_pg_broker()
    try:
        # Published once: a second restart does not send the will again.
        watcher = Paho(port, "acme/sub", sub_secret, "watcher", clean=False, expiry=3600)
        assert watcher.nothing(1.5)
        watcher.close()
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_the_longest_expiries_mqtt_allows_survive_the_store(devices):
    """MQTT 5's longest Message Expiry Interval (2^32 - 1 s) on a queued message, a retained one
    and a will, in a session that never expires (0xFFFFFFFF), through Postgres and a kill -9:
    kept as they were (issue 28: the cluster codec could not hold that expiry; the store, with
    its timestamps, JSON and 64-bit columns, can)."""
    longest, never = 2**32 - 1, 0xFFFFFFFF
    sub_secret, pub_secret = devices

    def lasting() -> Properties:
        properties = Properties(PacketTypes.PUBLISH)
        properties.MessageExpiryInterval = longest
        return properties

    will_properties = Properties(PacketTypes.WILLMESSAGE)
    will_properties.MessageExpiryInterval = longest
    will_properties.WillDelayInterval = 1
    process, port = start_pg_broker()
    try:
        sub = Paho(port, "acme/sub", sub_secret, "long-sub", clean=False, expiry=never)
        sub.subscribe("long/#", 1)
        sub.close()  # offline: its messages wait in Postgres
        pub = Paho(port, "acme/pub", pub_secret, "long-pub")
        pub.publish("long/queued", "queued", 1, properties=lasting())
        pub.publish("long/kept", "retained", 1, retain=True, properties=lasting())
        pub.close()
        leaving = Paho(
            port,
            "acme/pub",
            pub_secret,
            "long-will",
            clean=False,
            expiry=never,
            will=("long/will", b"gone", 1, False, will_properties),
        )
        time.sleep(0.5)  # the session record (and its will) committed
        kill9(process)
        leaving.stop_loop()
    finally:
        if process.poll() is None:
            kill9(process)

    process, port = start_pg_broker()
    try:
        back = Paho(port, "acme/sub", sub_secret, "long-sub", clean=False, expiry=never)
        assert back.session_present
        got = {m.topic: m for m in back.expect(3, 8)}
        assert {t: m.payload for t, m in got.items()} == {
            "long/queued": b"queued",
            "long/kept": b"retained",  # delivered to the durable session when published
            "long/will": b"gone",  # after its delay, the session being gone with the node
        }
        for message in got.values():
            assert longest - 10 <= message.properties.MessageExpiryInterval <= longest
        back.close()
        fresh = Paho(port, "acme/sub", sub_secret, "long-fresh")
        fresh.subscribe("long/kept", 1)
        kept = fresh.expect(1, 5)
        assert [(m.payload, m.retain) for m in kept] == [(b"retained", True)]
        assert kept[0].properties.MessageExpiryInterval >= longest - 10
        fresh.close()
    finally:
        process.terminate()
        process.wait(timeout=15)

"""Replay from a time on a real broker over Postgres and its archive (issue 45): SUBSCRIBE to
`$replay/{from}/{filter}` gets the tenant's history, then the live messages, each once, while a
publisher runs through the switch; the ACL holds on replay; no tenant reaches another's
history; a tenant that keeps no history is told so."""

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from tenants.acls import services as acl_services
from tenants.devices import services as device_services
from tenants.history.services import history_policy_create
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.storage.test_durability import kill9
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def secrets():
    acme = tenant_services.tenant_create("acme")
    tenant_services.tenant_set_quota(acme, {"max_publish_rate": 1_000_000})
    history_policy_create(tenant=acme, topic_filter="#", days=1)
    rival = tenant_services.tenant_create("rival")
    history_policy_create(tenant=rival, topic_filter="#", days=1)
    bare = tenant_services.tenant_create("bare")  # the free plan keeps no history
    made = {}
    for tenant, name in ((acme, "pub"), (acme, "sub"), (acme, "nosy"), (rival, "spy"), (bare, "b")):
        device, made[name] = device_services.device_create(
            tenant=tenant, name=name, client_id_policy="any"
        )
        if name == "nosy":  # may not read plant/2: withheld on replay as live
            acl_services.acl_add(
                tenant=acme, action="subscribe", permission="deny", topic="plant/2/#", device=device
            )
    return made


def test_a_replay_hands_over_to_live_with_every_message_once(secrets, tmp_path, monkeypatch):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    process, port = start_pg_broker("--archive-interval", "0.2")
    try:
        pub = Paho(port, "acme/pub", secrets["pub"], "pub")
        sent: list[str] = []
        stop = threading.Event()

        def publish() -> None:  # runs through the switch from history to live
            i = 0
            while not stop.is_set():
                payload = f"m{i}"
                pub.publish(f"plant/{i % 3}/temp", payload, 2)
                sent.append(payload)
                i += 1

        worker = threading.Thread(target=publish)
        worker.start()
        while len(sent) < 300:
            time.sleep(0.01)
        sub = Paho(port, "acme/sub", secrets["sub"], "replayer")
        granted = sub.subscribe("$replay/1h/plant/+/temp", 2)
        old = Paho(port, "acme/sub", secrets["sub"], "replayer-311", v5=False)
        old.subscribe("$replay/1h/plant/+/temp", 1)
        nosy = Paho(port, "acme/nosy", secrets["nosy"], "nosy")
        nosy.subscribe("$replay/1h/plant/+/temp", 1)
        spy = Paho(port, "rival/spy", secrets["spy"], "spy")
        spy.subscribe("$replay/1h/#", 2)
        spy.subscribe("$replay/1h/plant/+/temp", 2)
        while len(sent) < 600:
            time.sleep(0.01)
        stop.set()
        worker.join(10)
        assert granted[0].value == 2
        every = [f"m{i}" for i in range(len(sent))]
        got = [m.payload.decode() for m in sub.expect(len(sent), 20)]
        assert got == every  # history, then live: each message once, in order (QoS 2)
        assert sub.nothing(0.5)
        got_311 = [m.payload.decode() for m in old.expect(len(sent), 20)]
        assert got_311 == every  # MQTT 3.1.1 alike
        readable = [p for i, p in enumerate(every) if i % 3 != 2]
        assert [m.payload.decode() for m in nosy.expect(len(readable), 20)] == readable
        assert nosy.nothing(0.3)  # plant/2 withheld, archived or live
        assert spy.nothing(0.5)  # another tenant's history and live messages stay out of reach
        bare = Paho(port, "bare/b", secrets["b"], "bare")
        assert bare.subscribe("$replay/1h/#", 1)[0].value == 1  # granted: live only
        assert "no history is kept" in bare.suback_properties.ReasonString
        assert bare.subscribe("$replay/yesterday/#", 1)[0].value == 0x8F  # says when, or not
        for client in (pub, sub, old, nosy, spy, bare):
            client.close()
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_a_kill_9_mid_replay_loses_no_acknowledged_message(secrets, tmp_path, monkeypatch):
    """The broker killed while a persistent subscriber's replay runs: the live messages
    acknowledged meanwhile were kept for it (its session's queue) and come after the restart;
    the history is still there for the replay asked again from the same instant."""
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    since = (datetime.now(UTC) - timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    replay = f"$replay/{since}/plant/#"
    history = [f"h{i}" for i in range(3000)]
    process, port = start_pg_broker("--archive-interval", "0.2")
    try:
        pub = Paho(port, "acme/pub", secrets["pub"], "pub")
        for payload in history:
            pub.publish("plant/1/temp", payload, 1)  # each acknowledged
        sub = Paho(port, "acme/sub", secrets["sub"], "keeper", clean=False, expiry=3600)
        sub.subscribe(replay, 1)
        sent = [(f"l{i}", pub.client.publish("plant/1/temp", f"l{i}", 1)) for i in range(500)]
        got = [m.payload.decode() for m in sub.expect(300, 10)]  # the replay under way
        kill9(process)
        sub.stop_loop()
        pub.stop_loop()
        got += [m.payload.decode() for m in sub.expect(len(history) + len(sent), 0.5)]
        acknowledged = [payload for payload, info in sent if info.is_published()]
    finally:
        if process.poll() is None:
            kill9(process)
    assert acknowledged and len(set(got)) < len(history) + len(acknowledged)  # killed mid-way
    process, port = start_pg_broker("--archive-interval", "0.2")
    try:
        back = Paho(port, "acme/sub", secrets["sub"], "keeper", clean=False, expiry=3600)
        rest = [m.payload.decode() for m in back.expect(len(acknowledged), 20)]  # its queue
        back.subscribe(replay, 1)  # the history once more, from the same instant
        deadline = time.monotonic() + 30
        while set(history) - set(got) - set(rest) and time.monotonic() < deadline:
            rest += [m.payload.decode() for m in back.expect(500, 1.0)]
        lost = (set(history) | set(acknowledged)) - set(got) - set(rest)
        assert not lost, f"{len(lost)} acknowledged messages lost, e.g. {sorted(lost)[:5]}"
        back.close()
    finally:
        process.terminate()
        process.wait(timeout=15)

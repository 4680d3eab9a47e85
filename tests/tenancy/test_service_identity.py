"""The portal's read-only service identity, from both sides: what it may see, and that no one
else can borrow it (forged, foreign, expired tokens; `$` client ids)."""

import json
import time

import pytest

from data_plane.tenancy import service_identity
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.tenancy.test_broker_tenancy import running_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)
KEY = b"test-service-key"


@pytest.fixture
def broker(monkeypatch):
    monkeypatch.setenv("MQTT_SERVICE_KEY", KEY.decode())
    with running_pg_broker("--sys-interval", "0.3") as port:
        yield port


@pytest.fixture
def tenants():
    acme = tenant_services.tenant_create("acme")
    _, acme_secret = device_services.device_create(
        tenant=acme, name="sensor-1", client_id_policy="any"
    )
    other = tenant_services.tenant_create("other")
    _, other_secret = device_services.device_create(
        tenant=other, name="probe", client_id_policy="any"
    )
    return acme, acme_secret, other_secret


def portal(
    port: int,
    tenant: str = "acme",
    *,
    key: bytes = KEY,
    token_for: str | None = None,
    client_id: str | None = None,
    ttl: int = 300,
) -> Paho:
    identifier = client_id or service_identity.new_client_id()
    token = service_identity.sign(key, token_for or tenant, identifier, ttl=ttl)
    return Paho(port, f"{tenant}/$portal", token, identifier)


def test_sees_its_tenant_only_and_cannot_publish(broker, tenants):
    acme, acme_secret, other_secret = tenants
    viewer = portal(broker)
    assert viewer.reason_code == 0
    viewer.subscribe("#", 0)
    viewer.subscribe("$events/#", 0)
    assert viewer.subscribe("$share/g/#", 0)[0].value == 0x87  # would steal from consumers

    listener = Paho(broker, "acme/sensor-1", acme_secret, "listener")
    listener.subscribe("open/#", 1)
    viewer.client.publish("open/x", "from the portal", 1).wait_for_publish(5)
    assert listener.nothing(0.5)  # read-only

    intruder = Paho(broker, "other/probe", other_secret, "probe")
    intruder.publish("open/x", "other tenant", 1)
    device = Paho(broker, "acme/sensor-1", acme_secret, "device")
    device.publish("open/x", "acme data", 1)
    seen = [(m.topic, m.payload) for m in viewer.expect(4, 3)]
    assert ("open/x", b"acme data") in seen
    assert all(payload != b"other tenant" for _, payload in seen)
    events = [json.loads(p) for t, p in seen if t == "$events/client_connected"]
    # Its tenant's connects, not the other tenant's, and not the viewer itself.
    assert [(e["username"], e["clientid"]) for e in events] == [
        ("acme/sensor-1", "listener"),
        ("acme/sensor-1", "device"),
    ]

    # Not one of the tenant's clients: $SYS counts the two devices and lists them online.
    sys = Paho(broker, "acme/sensor-1", acme_secret, "sys-reader")
    sys.subscribe("$SYS/broker/clients/#", 0)
    time.sleep(0.8)
    figures = {m.topic: m.payload for m in sys.expect(20, 1)}
    assert figures["$SYS/broker/clients/connected"] == b"3"  # listener, device, sys-reader
    assert json.loads(figures["$SYS/broker/clients/online"])["devices"] == ["sensor-1"]
    for client in (viewer, listener, intruder, device, sys):
        client.close()


def test_nobody_else_can_use_it(broker, tenants):
    acme, acme_secret, other_secret = tenants
    assert portal(broker, key=b"guessed key").reason_code == 0x86
    assert portal(broker, "other", token_for="acme").reason_code == 0x86  # acme's token
    assert portal(broker, ttl=-1).reason_code == 0x86  # expired
    assert portal(broker, client_id="viewer-1").reason_code == 0x86  # not a $portal- id
    assert Paho(broker, "acme/$portal", "", "$portal-abc").reason_code == 0x86
    # A device may not take a `$` client id (it could collide with the portal's sessions).
    assert Paho(broker, "acme/sensor-1", acme_secret, "$portal-abc").reason_code == 0x85
    # A token is bound to its client id.
    token = service_identity.sign(KEY, "acme", "$portal-one")
    assert Paho(broker, "acme/$portal", token, "$portal-two").reason_code == 0x86


def test_suspending_the_tenant_ends_its_live_views(broker, tenants):
    acme, _, _ = tenants
    viewer = portal(broker)
    assert viewer.reason_code == 0
    tenant_services.tenant_set_status(acme, "suspended")
    assert viewer.disconnected.wait(3)
    assert portal(broker).reason_code == 0x8A


def rules_identity(
    port: int,
    tenant: str = "acme",
    *,
    token_for: str | None = None,
    client_id: str = "$rules-7-abc",
    key: bytes = KEY,
) -> Paho:
    token = service_identity.sign(key, token_for or tenant, client_id)
    return Paho(port, f"{tenant}/$rules", token, client_id)


def test_rules_identity_publishes_in_its_tenant_only_and_never_subscribes(broker, tenants):
    acme, acme_secret, other_secret = tenants
    rules = rules_identity(broker)
    assert rules.reason_code == 0
    listener = Paho(broker, "acme/sensor-1", acme_secret, "listener")
    listener.subscribe("alerts/#", 1)
    sys_reader = Paho(broker, "acme/sensor-1", acme_secret, "sys-reader")
    sys_reader.subscribe("$SYS/#", 0)
    intruder = Paho(broker, "other/probe", other_secret, "probe")
    intruder.subscribe("#", 1)
    rules.client.publish("alerts/hot", "from a rule", 1).wait_for_publish(5)
    got = listener.expect(1, 5)
    assert [(m.topic, m.payload) for m in got] == [("alerts/hot", b"from a rule")]
    assert intruder.nothing(0.5)  # never another tenant's namespace
    assert rules.subscribe("alerts/#", 0)[0].value == 0x87  # publish-only
    rules.client.publish("$SYS/broker/clients/connected", "999", 1).wait_for_publish(5)
    forged = [m for m in sys_reader.expect(50, 1) if m.payload == b"999"]
    assert forged == []  # `$` topics are the broker's
    for client in (rules, listener, sys_reader, intruder):
        client.close()


def test_nobody_else_can_use_the_rules_identity(broker, tenants):
    acme, acme_secret, _ = tenants
    assert rules_identity(broker, key=b"guessed").reason_code == 0x86
    assert rules_identity(broker, "other", token_for="acme").reason_code == 0x86
    # A portal token (or client id) does not open the rules identity, nor the reverse.
    assert rules_identity(broker, client_id="$portal-abc").reason_code == 0x86
    assert portal(broker, client_id="$rules-7-abc").reason_code == 0x86
    assert Paho(broker, "acme/sensor-1", acme_secret, "$rules-7-abc").reason_code == 0x85


def test_what_rules_republish_shares_the_tenants_rate_and_is_metered(broker, tenants):
    """Issue 29: a rule fanning out is the tenant's traffic. Its republish waits for the
    tenant's publish rate like a device (slowed, nothing refused) and counts as the tenant's
    messages in its figures ($SYS, usage)."""
    acme, acme_secret, _ = tenants
    tenant_services.tenant_set_quota(acme, {"max_publish_rate": 10})
    time.sleep(0.5)
    listener = Paho(broker, "acme/sensor-1", acme_secret, "listener")
    listener.subscribe("fan/#", 1)
    rules = rules_identity(broker)
    device = Paho(broker, "acme/sensor-1", acme_secret, "device")
    started = time.monotonic()
    infos = [rules.client.publish("fan/out", f"{n}", 1) for n in range(15)]
    infos += [device.client.publish("fan/in", f"{n}", 1) for n in range(15)]  # the same rate
    for info in infos:
        info.wait_for_publish(10)
    took = time.monotonic() - started
    device.close()
    got = listener.expect(30, 5)
    time.sleep(0.7)  # a $SYS round
    listener.subscribe("$SYS/broker/messages/received", 0)
    sys_figure = [m for m in listener.expect(5, 2) if m.topic.startswith("$SYS")]
    rules.close(), listener.close()
    assert len(got) == 30 and all(i.is_published() for i in infos)
    assert took >= 1.7  # a second's burst of 10, then 20 at 10/s
    assert sys_figure and int(sys_figure[-1].payload) >= 30  # metered as the tenant's

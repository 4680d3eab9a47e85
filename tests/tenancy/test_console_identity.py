"""The portal's browser MQTT client (`$console` for members who may write, `$viewer` for those who
may only read) is one of the tenant's clients, not the platform's: metered in the tenant's usage
(messages, connection-minutes), counted against its quotas and held to its ACL like a device —
and from the attacker's side, one tenant's browser client never reaches another's topics.

A real broker process on the test database, tokens signed as the portal signs them, paho clients.
"""

from __future__ import annotations

import time

import pytest
from django.db.models import Sum

from common.security import service_token
from tenants.acls import services as acl_services
from tenants.devices import services as device_services
from tenants.models import Usage
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.tenancy.test_broker_tenancy import running_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)
KEY = b"test-console-key"


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("MQTT_SERVICE_KEY", KEY.decode())


def browser(port: int, tenant: str, device: str = service_token.CONSOLE_DEVICE, **kw) -> Paho:
    """The browser client as the portal's `client_token` view issues it."""
    client_id = service_token.new_client_id(device)
    token = service_token.sign(KEY, kw.pop("token_for", tenant), client_id)
    return Paho(port, f"{tenant}/{device}", token, client_id, **kw)


def usage(tenant) -> dict:
    return Usage.objects.filter(tenant=tenant).aggregate(
        messages_in=Sum("messages_in"),
        messages_out=Sum("messages_out"),
        message_units=Sum("message_units"),
        connection_minutes=Sum("connection_minutes"),
    )


def test_browser_client_traffic_is_metered_as_the_tenants(tmp_path):
    acme = tenant_services.tenant_create("acme")
    _, secret = device_services.device_create(tenant=acme, name="sensor-1", client_id_policy="any")
    with running_pg_broker("--usage-flush-interval", "0.5") as port:
        console = browser(port, "acme")
        assert console.reason_code == 0
        listener = Paho(port, "acme/sensor-1", secret, "listener")
        listener.subscribe("lab/#", 1)
        console.subscribe("lab/#", 1)
        for n in range(3):  # 6,000 + 5 topic bytes: 2 units each (5 KiB increments)
            console.publish("lab/x", b"%d" % n + b"x" * 5999, 1)
        assert len(listener.expect(3, 5)) == 3
        assert len(console.expect(3, 5)) == 3  # its own deliveries are billed too
        viewer = browser(port, "acme", service_token.VIEWER_DEVICE)
        assert viewer.reason_code == 0
        viewer.subscribe("lab/#", 0)
        time.sleep(0.2)
        one_more = Paho(port, "acme/sensor-1", secret, "one-more")
        one_more.publish("lab/y", "hello", 1)
        assert [m.payload for m in viewer.expect(1, 5)] == [b"hello"]
        for client in (console, listener, viewer, one_more):
            client.close()
        time.sleep(0.3)
    # Stopping the broker flushes the current minute. Each unit counted, by hand:
    #   CONNECTs: console, listener, viewer, one-more                    4
    #   SUBSCRIBEs (filters of 5 bytes): listener, console, viewer       3
    #   3 publishes × 2 units, delivered to listener and console: 6 + 12 18
    #   "hello" (10 bytes): received 1, delivered to listener, console,
    #   viewer                                                            4
    got = usage(acme)
    assert got["messages_in"] == 4
    assert got["messages_out"] == 3 + 3 + 3
    assert got["message_units"] == 4 + 3 + 18 + 4
    assert got["connection_minutes"] == 4  # each connection < 1 minute: one each


def test_browser_client_counts_against_quotas_and_the_acl(tmp_path):
    acme = tenant_services.tenant_create("acme")
    _, secret = device_services.device_create(tenant=acme, name="sensor-1", client_id_policy="any")
    acl_services.acl_add(tenant=acme, action="publish", permission="deny", topic="secret/#")
    tenant_services.tenant_set_quota(acme, {"max_connections": 2})
    with running_pg_broker() as port:
        listener = Paho(port, "acme/sensor-1", secret, "listener")
        listener.subscribe("#", 1)
        console = browser(port, "acme")
        assert console.reason_code == 0
        # The tenant's ACL: a tenant-wide deny holds for the console as for a device.
        console.publish("secret/x", "no", 1)
        console.publish("open/x", "yes", 1)
        assert [(m.topic, m.payload) for m in listener.expect(1, 5)] == [("open/x", b"yes")]
        # The tenant's connection quota: the console is the second of two.
        third = browser(port, "acme")
        assert third.reason_code == 0x97
        third.close()
        console.close()
        # A viewer (read-only member) never publishes, whatever the ACL allows.
        viewer = browser(port, "acme", service_token.VIEWER_DEVICE)
        assert viewer.reason_code == 0
        viewer.client.publish("open/y", "from a viewer", 1).wait_for_publish(5)
        assert listener.nothing(0.5)
        viewer.close()
        listener.close()


def test_one_tenants_browser_client_cannot_reach_anothers_topics():
    acme = tenant_services.tenant_create("acme")
    _, acme_secret = device_services.device_create(
        tenant=acme, name="sensor-1", client_id_policy="any"
    )
    other = tenant_services.tenant_create("other")
    with running_pg_broker() as port:
        attacker = browser(port, "other")
        assert attacker.reason_code == 0
        for topic_filter in ("#", "+/#", "acme/#", "$share/g/#"):
            attacker.subscribe(topic_filter, 1)
        victim_listener = Paho(port, "acme/sensor-1", acme_secret, "victim")
        victim_listener.subscribe("#", 1)
        time.sleep(0.2)
        device = Paho(port, "acme/sensor-1", acme_secret, "device")
        device.publish("lab/x", "acme only", 1)
        attacker.publish("lab/x", "from other", 1)
        assert [m.payload for m in victim_listener.expect(1, 5)] == [b"acme only"]
        assert victim_listener.nothing(0.5)  # the other tenant's publish stayed there
        seen = [m.payload for m in attacker.expect(5, 1)]
        assert b"acme only" not in seen
        # Its token opens no door to acme: not as acme's console, viewer or platform identity.
        for identity in (service_token.CONSOLE_DEVICE, service_token.VIEWER_DEVICE):
            stolen = browser(port, "acme", identity, token_for="other")
            assert stolen.reason_code == 0x86
            stolen.close()
        # A viewer token is not a console token (the client id names the identity).
        viewer_id = service_token.new_client_id(service_token.VIEWER_DEVICE)
        viewer_token = service_token.sign(KEY, "other", viewer_id)
        promoted = Paho(port, "other/$console", viewer_token, viewer_id)
        assert promoted.reason_code == 0x86
        for client in (attacker, victim_listener, promoted, device):
            client.close()
    assert other.slug == "other"

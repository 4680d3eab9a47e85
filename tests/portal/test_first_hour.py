"""The first hour, through Django's test client on real Postgres: the ACL tester (the broker's own
evaluation), onboarding snippets, quotas with units, the devices API's presence — each also tried
from another tenant's side."""

from datetime import timedelta

import pytest
from django.utils import timezone

from common.access import acl
from tenants.accounts import services as account_services
from tenants.acls import services as acl_services
from tenants.devices import services as device_services
from tenants.models import DeviceConnection
from tenants.tenant import services as tenant_services
from tests.api.conftest import client_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def acme(client):
    tenant, user, token = account_services.signup(
        tenant="acme", email="me@acme.io", password="a long passphrase"
    )
    client.force_login(user)
    device_services.device_create(tenant=tenant, name="sensor-1")
    device_services.device_create(tenant=tenant, name="sensor-2")
    acl_services.acl_add(
        tenant=tenant, action="publish", permission="allow", topic="devices/${client}/#"
    )
    acl_services.acl_add(tenant=tenant, action="both", permission="deny", topic="#")
    return tenant, client_for(token)


@pytest.fixture
def evil():
    tenant, _, token = account_services.signup(
        tenant="evil", email="me@evil.io", password="a long passphrase"
    )
    device_services.device_create(tenant=tenant, name="mole")
    return tenant, client_for(token)


def test_acl_tester_api_answers_with_the_broker_evaluation(acme):
    tenant, api = acme
    cases = [
        ("sensor-1", "publish", "devices/sensor-1/temp", True, "devices/${client}/#"),
        ("sensor-1", "publish", "devices/sensor-2/temp", False, "#"),
        ("sensor-2", "subscribe", "devices/#", False, "#"),
    ]
    for device, action, topic, allowed, rule_topic in cases:
        response = api.post(
            "/api/v1/acls/test", {"device": device, "action": action, "topic": topic}, format="json"
        )
        assert response.status_code == 200, response.content
        body = response.json()
        assert body["allowed"] is allowed, (device, topic)
        assert body["decided_by"] == "rule" and body["rule"]["topic"] == rule_topic
        # The same answer as the object the broker builds at CONNECT.
        policy = acl.AclPolicy(
            [
                acl.AclEntry("publish", True, "devices/${client}/#"),
                acl.AclEntry("both", False, "#"),
            ],
            tenant="acme",
            device=device,
            default_allow=True,
        )
        judge = policy.can_publish if action == "publish" else policy.can_subscribe
        assert judge(topic) is allowed
    bad = api.post(
        "/api/v1/acls/test",
        {"device": "sensor-1", "action": "publish", "topic": "a/+/b"},
        format="json",
    )
    assert bad.status_code == 400 and "topic" in bad.json()["error"]["fields"]


def test_acl_tester_default_when_no_rule_matches(evil):
    tenant, api = evil
    body = api.post(
        "/api/v1/acls/test", {"device": "mole", "action": "publish", "topic": "x"}, format="json"
    ).json()
    assert body["allowed"] is True and body["decided_by"] == "default" and body["rule"] is None


def test_acl_tester_from_the_attackers_side(acme, evil):
    """Another tenant's device names are 404, in the API and in the portal."""
    _, attacker_api = evil
    response = attacker_api.post(
        "/api/v1/acls/test",
        {"device": "sensor-1", "action": "publish", "topic": "devices/sensor-1/t"},
        format="json",
    )
    assert response.status_code == 404
    _, api = acme
    assert (
        api.post(
            "/api/v1/acls/test",
            {"device": "mole", "action": "publish", "topic": "x"},
            format="json",
        ).status_code
        == 404
    )


def test_acl_tester_in_the_portal(client, acme):
    page = client.get(
        "/acls/", {"device": "sensor-1", "action": "publish", "topic": "devices/sensor-1/t"}
    )
    assert b"Allowed" in page.content and b"devices/${client}/#" in page.content
    page = client.get("/acls/", {"device": "sensor-2", "action": "subscribe", "topic": "x/#"})
    assert b"Denied" in page.content
    assert client.get("/acls/", {"device": "mole", "topic": "x"}).status_code == 404
    bad = client.get("/acls/", {"device": "sensor-1", "action": "publish", "topic": "a/#"})
    assert b"Invalid topic name" in bad.content


def test_onboarding_fills_the_snippets_and_never_shows_other_tenants(client, acme, evil):
    page = client.get("/start/", {"device": "sensor-1"})
    text = page.content.decode()
    for expected in (
        "mosquitto_pub",
        "paho.mqtt.client",
        "require(&quot;mqtt&quot;)",
        "PubSubClient",
    ):
        assert expected in text, expected
    assert "acme/sensor-1" in text and "YOUR_DEVICE_SECRET" in text
    assert client.get("/start/", {"device": "mole"}).status_code == 404
    made = client.post("/start/", {"name": "first"}, follow=True)
    [mosquitto] = [s for s in made.context["snippets"] if s.key == "mosquitto"]
    assert "acme/first" in mosquitto.code and "YOUR_DEVICE_SECRET" not in mosquitto.code
    again = client.get("/start/", {"device": "first"})
    [mosquitto] = [s for s in again.context["snippets"] if s.key == "mosquitto"]
    assert "YOUR_DEVICE_SECRET" in mosquitto.code  # the secret was shown once


def test_quota_page_shows_units_and_usage(client, acme):
    tenant, _ = acme
    tenant_services.tenant_set_quota(tenant, {"max_connections": 4})
    device = tenant.devices.get(name="sensor-1")
    DeviceConnection.objects.create(
        tenant=tenant,
        device=device,
        client_id="sensor-1",
        connection_key="k1",
        broker="b",
        address="127.0.0.1",
        protocol_version=5,
        connected_at=timezone.now(),
        subscriptions=[{"filter": "a/#", "qos": 1}],
        heartbeat_at=timezone.now(),
    )
    page = client.get("/quota/").content.decode()
    assert "4 connections" in page and "1 connections" in page and "25%" in page
    assert "bytes/s" in page or "KiB/s" in page or "MiB/s" in page
    assert "day" in page or " s" in page  # session expiry in words


def test_devices_api_connected_and_stale_rows(acme, evil):
    tenant, api = acme
    device = tenant.devices.get(name="sensor-1")
    now = timezone.now()
    row = DeviceConnection.objects.create(
        tenant=tenant,
        device=device,
        client_id="sensor-1",
        connection_key="k2",
        broker="b",
        address="10.0.0.5",
        protocol_version=4,
        connected_at=now,
        heartbeat_at=now,
    )
    listed = {d["name"]: d["connected"] for d in api.get("/api/v1/devices").json()["results"]}
    assert listed == {"sensor-1": True, "sensor-2": False}
    assert api.get("/api/v1/devices/sensor-1").json()["connected"] is True
    # A row whose broker stopped heart-beating is not a connection.
    row.heartbeat_at = now - timedelta(minutes=5)
    row.save()
    assert api.get("/api/v1/devices/sensor-1").json()["connected"] is False
    _, attacker = evil
    assert attacker.get("/api/v1/devices/sensor-1").status_code == 404

"""QoS 0 to an offline persistent session: dropped by default, kept when the tenant says so;
the setting changes through the REST API and reaches a running broker."""

import time

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.models import Tenant
from tests.broker.clients import Paho
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)


def offline_round(port, secret, client_id, topic):
    sub = Paho(port, "acme/d", secret, client_id, clean=False, expiry=600)
    sub.subscribe(topic, 1)
    sub.close()
    pub = Paho(port, "acme/d", secret, f"{client_id}-pub")
    for i in range(3):
        pub.publish(topic, f"q0-{i}", 0)
    pub.publish(topic, "q1", 1)  # QoS 1 from the same publisher: ordered after the QoS 0 ones
    pub.close()
    back = Paho(port, "acme/d", secret, client_id, clean=False, expiry=600)
    received = [m.payload.decode() for m in back.expect(4, 3)]
    back.close()
    return received


def test_offline_qos0_follows_the_tenant_setting_live():
    tenant, user, _ = account_services.signup(
        tenant="acme", email="o@acme.io", password="a long passphrase"
    )
    _, secret = device_services.device_create(tenant=tenant, name="d", client_id_policy="any")
    api = APIClient()
    api.force_login(user)
    process, port = start_pg_broker("--no-archive")
    try:
        assert offline_round(port, secret, "c-default", "a/t") == ["q1"]  # QoS 0 dropped

        response = api.patch("/api/v1/tenant", {"queue_qos0_offline": True}, format="json")
        assert response.status_code == 200 and response.json()["queue_qos0_offline"] is True
        time.sleep(1.0)  # NOTIFY → the broker reloads the tenant's policy within a second
        assert offline_round(port, secret, "c-kept", "b/t") == ["q0-0", "q0-1", "q0-2", "q1"]
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_tenant_settings_api_validates_and_respects_roles():
    tenant, owner, _ = account_services.signup(
        tenant="acme", email="o@acme.io", password="a long phrase"
    )
    viewer = get_user_model().objects.create_user("viewer@acme.io", password="a long phrase")
    account_services.membership_add(user=viewer, tenant=tenant, role="viewer")
    api = APIClient()
    api.force_login(owner)
    body = api.patch("/api/v1/tenant", {"archive_enabled": False}, format="json").json()
    assert body["archive_enabled"] is False and body["queue_qos0_offline"] is False
    assert not Tenant.objects.get(id=tenant.id).archive_enabled
    for body, field in (
        ({"status": "active"}, "status"),
        ({"acl_default": "maybe"}, "acl_default"),
    ):
        bad = api.patch("/api/v1/tenant", body, format="json")
        assert bad.status_code == 400 and list(bad.json()["error"]["fields"]) == [field]
    reader = APIClient()
    reader.force_login(viewer)
    assert reader.patch("/api/v1/tenant", {"name": "x"}, format="json").status_code == 403
    assert Tenant.objects.get(id=tenant.id).name == "acme"

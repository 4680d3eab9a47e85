"""Just-in-time registration: a device certificate signed by a tenant's registered CA, naming a
device not yet known, makes that device on its first connection, once the tenant turned it on for
that CA (`PATCH /api/v1/cas/{name}`); before that it is refused, as it always was."""

from __future__ import annotations

import uuid

import pytest

from common.mqtt.reason_codes import ReasonCode
from tenants.models import Device
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.shadows.conftest import api_client, make_fleet

pytestmark = pytest.mark.django_db(transaction=True)


def connect(broker, cert: str, key: str, client_id: str) -> Paho:
    client = Paho(
        broker.tls_port,
        None,
        None,
        client_id,
        tls={"ca_certs": broker.server_ca, "certfile": cert, "keyfile": key},
        connect=False,
    )
    client.connect(wait=False)
    assert client.connack.wait(5), "no CONNACK"
    return client


def test_a_new_device_registers_on_first_connect_when_its_ca_allows(tls_broker, tmp_path):
    fleet = make_fleet(tmp_path, prefix="jit")
    owner = api_client(fleet.tenant)
    stranger = api_client(tenant_services.tenant_create(f"jit{uuid.uuid4().hex[:8]}"))
    name = f"newbie-{uuid.uuid4().hex[:6]}"
    cert, key = fleet.certificate(name)

    refused = connect(tls_broker, cert, key, name)
    assert refused.reason_code == ReasonCode.BAD_USER_NAME_OR_PASSWORD  # unknown device
    refused.close()
    assert not Device.objects.filter(tenant=fleet.tenant, name=name).exists()

    assert stranger.patch("/api/v1/cas/fleet", {"auto_registration": True}).status_code == 404
    turned = owner.patch("/api/v1/cas/fleet", {"auto_registration": True}, format="json")
    assert turned.status_code == 200 and turned.json()["auto_registration"] is True
    assert owner.patch("/api/v1/cas/fleet", {"auto_registration": "yes please"}).status_code == 400

    device = connect(tls_broker, cert, key, name)
    try:
        assert device.reason_code == ReasonCode.SUCCESS
        assert device.subscribe(f"things/{name}", 1)[0] < 0x80
        device.publish(f"things/{name}", b"hello", 1)
        assert device.expect(1)[0].payload == b"hello"
    finally:
        device.close()
    assert Device.objects.filter(tenant=fleet.tenant, name=name).exists()
    # Made in this tenant only: another tenant's namespace holds no such device.
    assert not Device.objects.filter(name=name).exclude(tenant=fleet.tenant).exists()

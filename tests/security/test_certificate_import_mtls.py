"""Issue 41: devices whose certificates were imported in bulk connect over mTLS with a real
client (mosquitto_pub, on the broker of `test_device_identity`), and stop when their
certificate is revoked from the tenant's certificate list. AWS-issued certificates name no
device of ours (their CN is "AWS IoT Certificate"), so the import names each."""

from __future__ import annotations

import pytest

from common.security.device_credentials import make_ca, make_leaf, pem_of
from tenants.models import Device
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.security.test_device_identity import (
    api,
    mosquitto_pub,
    register_ca,
    tls_broker,
    write_identity,
)

pytestmark = pytest.mark.django_db(transaction=True)


def test_devices_imported_in_bulk_connect_over_mtls(tmp_path):
    acme = tenant_services.tenant_create("acme")
    owner = api(acme)
    made = {name: make_leaf("AWS IoT Certificate", None, None) for name in ("lamp", "pump")}
    body = {
        "certificates": [{"device": name, "pem": pem_of(cert)} for name, (cert, _) in made.items()],
        "create_devices": True,  # the things do not exist here yet
    }
    response = owner.post("/api/v1/certificates/import", body, format="json")
    assert response.status_code == 200, response.content
    assert [r["status"] for r in response.json()["results"]] == ["registered", "registered"]
    assert set(Device.objects.filter(tenant=acme).values_list("name", flat=True)) == {
        "lamp",
        "pump",
    }
    lamp = write_identity(tmp_path, "lamp", *made["lamp"])
    pump = write_identity(tmp_path, "pump", *made["pump"])
    with tls_broker(tmp_path) as ports:
        port, server_ca = ports["mqtts"], tmp_path / "server-ca.pem"
        assert mosquitto_pub(port, server_ca, *lamp, "-u", "acme/lamp", client_id="lamp") == 0
        assert mosquitto_pub(port, server_ca, *pump, "-u", "acme/pump", client_id="pump") == 0
        # Each certificate is its own device's: lamp's does not open pump.
        assert mosquitto_pub(port, server_ca, *lamp, "-u", "acme/pump", client_id="pump") != 0
        [row] = owner.get("/api/v1/certificates?device=lamp").json()["results"]
        revoke = f"/api/v1/devices/{row['device']}/certificates/{row['id']}"
        assert owner.delete(revoke).status_code == 204
        assert mosquitto_pub(port, server_ca, *lamp, "-u", "acme/lamp", client_id="lamp") != 0
        assert mosquitto_pub(port, server_ca, *pump, "-u", "acme/pump", client_id="pump") == 0


def test_revoking_an_imported_certificate_refuses_it_though_its_ca_is_registered(tmp_path):
    """All of a registered CA's devices imported at once (`ca`): each certificate is then listed
    and revoked on its own. Revoked, it is refused (with or without a user name) and its live
    connection ends, though the CA that signed it stays registered; its siblings still connect."""
    acme = tenant_services.tenant_create("acme")
    owner = api(acme)
    ca, ca_key = make_ca("acme fleet CA")
    assert register_ca(owner, "fleet", ca, ca_key).status_code == 201
    made = {name: make_leaf(name, ca, ca_key) for name in ("lamp", "pump")}
    body = {
        "ca": "fleet",
        "certificates": [pem_of(cert) for cert, _ in made.values()],
        "create_devices": True,
    }
    response = owner.post("/api/v1/certificates/import", body, format="json")
    assert [r["status"] for r in response.json()["results"]] == ["registered", "registered"]
    lamp = write_identity(tmp_path, "lamp", *made["lamp"])
    pump = write_identity(tmp_path, "pump", *made["pump"])
    with tls_broker(tmp_path) as ports:
        port, server_ca = ports["mqtts"], tmp_path / "server-ca.pem"
        assert mosquitto_pub(port, server_ca, *lamp, client_id="lamp") == 0
        tls = {"ca_certs": str(server_ca), "certfile": lamp[0], "keyfile": lamp[1]}
        live = Paho(port, "", "", "lamp", tls=tls)  # admitted by the CA (no user name)
        assert live.reason_code == 0
        [row] = owner.get("/api/v1/certificates?device=lamp").json()["results"]
        assert row["issuer"] == "CN=acme fleet CA"
        assert owner.delete(f"/api/v1/devices/lamp/certificates/{row['id']}").status_code == 204
        assert live.disconnected.wait(3)
        assert mosquitto_pub(port, server_ca, *lamp, client_id="lamp") != 0
        assert mosquitto_pub(port, server_ca, *lamp, "-u", "acme/lamp", client_id="lamp") != 0
        assert mosquitto_pub(port, server_ca, *pump, client_id="pump") == 0

"""Issue 41 (moving from AWS): device certificates imported many at once, each with its own
result, and listed for the whole tenant; revoked through the device's API; another tenant's are
404s, tried from the attacker's side. Certificates are made with `cryptography` (`make_ca`,
`make_leaf`)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from common.security.device_credentials import make_ca, make_leaf, pem_of
from tenants.devices import identity
from tenants.devices import services as device_services
from tenants.models import Device, DeviceCertificate
from tests.security.test_device_identity import register_ca

pytestmark = pytest.mark.django_db

IMPORT = "/api/v1/certificates/import"


def leaf_pem(cn: str, ca=None, ca_key=None, **dates) -> str:
    return pem_of(make_leaf(cn, ca, ca_key, **dates)[0])


def results_of(response) -> list[tuple[str | None, str]]:
    assert response.status_code == 200, response.content
    return [(r["device"], r["status"]) for r in response.json()["results"]]


def test_one_broken_certificate_fails_alone(acme):
    tenant, client = acme
    for name in ("lamp", "pump"):
        device_services.device_create(tenant=tenant, name=name)
    lamp, pump = leaf_pem("lamp"), leaf_pem("aws-generated-cn")
    ca, _ = make_ca("a CA")
    past = datetime.now(UTC) - timedelta(days=30)
    expired = leaf_pem("pump", not_before=past, not_after=past + timedelta(days=1))
    body = {
        "certificates": [
            lamp,  # a bare PEM: its CN names the device
            {"device": "pump", "pem": pump},  # AWS's own certificates name no device of ours
            "-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n",
            {"device": "pump", "pem": expired},
            {"device": "pump", "pem": pem_of(ca)},
            leaf_pem("ghost"),  # no such device, and create_devices was not asked for
        ]
    }
    response = client.post(IMPORT, body, format="json")
    assert results_of(response) == [
        ("lamp", "registered"),
        ("pump", "registered"),
        (None, "error"),
        ("pump", "error"),
        ("pump", "error"),
        ("ghost", "error"),
    ]
    answer = response.json()
    assert (answer["registered"], answer["exists"], answer["errors"]) == (2, 0, 4)
    results = answer["results"]
    assert [r["index"] for r in results] == list(range(6))
    assert "not a readable certificate" in results[2]["error"]
    assert "expired" in results[3]["error"]
    assert "CA certificate" in results[4]["error"]
    assert "no device 'ghost'" in results[5]["error"] and "create_devices" in results[5]["error"]
    assert results[0]["error"] is None and len(results[0]["fingerprint"]) == 64
    assert not Device.objects.filter(tenant=tenant, name="ghost").exists()

    listed = client.get("/api/v1/certificates").json()
    assert listed["count"] == 2
    rows = {row["device"]: row for row in listed["results"]}
    assert rows["lamp"]["fingerprint"] == results[0]["fingerprint"]
    assert rows["lamp"]["issuer"] == "CN=lamp" and rows["pump"]["issuer"] == "CN=aws-generated-cn"
    assert rows["pump"]["status"] == "active" and rows["pump"]["not_after"]

    # Again, with the missing device made this time: what is there already says so.
    again = client.post(
        IMPORT, {"certificates": [lamp, body["certificates"][5]], "create_devices": True}, "json"
    )
    assert results_of(again) == [("lamp", "exists"), ("ghost", "registered")]
    assert again.json()["results"][1]["device_created"] is True
    assert Device.objects.filter(tenant=tenant, name="ghost").exists()
    # The same certificate for another device of the tenant: refused, naming where it is.
    elsewhere = client.post(IMPORT, {"certificates": [{"device": "pump", "pem": lamp}]}, "json")
    assert results_of(elsewhere) == [("pump", "error")]
    assert "already registered for device 'lamp'" in elsewhere.json()["results"][0]["error"]


def test_a_device_made_for_a_refused_certificate_is_not_kept(acme):
    tenant, client = acme
    device_services.device_create(tenant=tenant, name="lamp")
    lamp = leaf_pem("lamp")
    client.post(IMPORT, {"certificates": [lamp]}, format="json")
    response = client.post(
        IMPORT,
        {"certificates": [{"device": "new-one", "pem": lamp}], "create_devices": True},
        format="json",
    )
    assert results_of(response) == [("new-one", "error")]
    assert not Device.objects.filter(tenant=tenant, name="new-one").exists()
    bad_name = client.post(
        IMPORT, {"certificates": [leaf_pem("not a name!")], "create_devices": True}, "json"
    )
    assert results_of(bad_name) == [("not a name!", "error")]
    assert "device name" in bad_name.json()["results"][0]["error"]


def test_all_of_a_registered_cas_devices_at_once(acme, attacker):
    tenant, client = acme
    _, evil = attacker
    ca, ca_key = make_ca("acme fleet CA")
    other, other_key = make_ca("someone else's CA")
    assert register_ca(client, "fleet", ca, ca_key).status_code == 201
    names = [f"sensor-{n}" for n in range(5)]
    certificates = [leaf_pem(name, ca, ca_key) for name in names]
    certificates.append(leaf_pem("sensor-9", other, other_key))
    certificates.append({"device": "renamed", "pem": leaf_pem("sensor-8", ca, ca_key)})
    response = client.post(
        IMPORT,
        {"ca": "fleet", "certificates": certificates, "create_devices": True},
        format="json",
    )
    results = response.json()["results"]
    assert results_of(response) == [
        *((name, "registered") for name in names),
        ("sensor-9", "error"),
        ("renamed", "error"),
    ]
    assert "not signed by CA 'fleet'" in results[5]["error"]
    assert "'sensor-8'" in results[6]["error"]
    assert sorted(Device.objects.filter(tenant=tenant).values_list("name", flat=True)) == names
    issuers = {row["issuer"] for row in client.get("/api/v1/certificates").json()["results"]}
    assert issuers == {"CN=acme fleet CA"}
    # A CA the tenant does not have, its own revoked one, or another tenant's: a 400 for all.
    unknown = client.post(IMPORT, {"ca": "nope", "certificates": certificates[:1]}, "json")
    assert unknown.status_code == 400 and "No CA named 'nope'" in str(unknown.json())
    theirs = evil.post(IMPORT, {"ca": "fleet", "certificates": certificates[:1]}, "json")
    assert theirs.status_code == 400 and "No CA named 'fleet'" in str(theirs.json())
    assert client.delete("/api/v1/cas/fleet").status_code == 204
    revoked = client.post(IMPORT, {"ca": "fleet", "certificates": certificates[:1]}, "json")
    assert revoked.status_code == 400 and "revoked" in str(revoked.json())


def test_an_import_is_bounded_and_its_shape_checked(acme):
    _, client = acme
    pem = leaf_pem("lamp")
    too_many = client.post(IMPORT, {"certificates": [pem] * (identity.MAX_IMPORT + 1)}, "json")
    assert too_many.status_code == 400
    assert "At most 100 certificates per call" in str(too_many.json())
    assert DeviceCertificate.objects.count() == 0
    empty = client.post(IMPORT, {"certificates": []}, format="json")
    assert empty.status_code == 400
    shapeless = client.post(IMPORT, {"certificates": [{"cert": pem}]}, format="json")
    assert shapeless.status_code == 400 and "Unknown field(s): cert" in str(shapeless.json())


def test_list_statuses_filters_pages_and_revocation(acme):
    tenant, client = acme
    for name in ("a", "b", "c"):
        device_services.device_create(tenant=tenant, name=name)
    imported = client.post(
        IMPORT, {"certificates": [leaf_pem("a"), leaf_pem("b"), leaf_pem("c")]}, "json"
    ).json()["results"]
    by_device = {r["device"]: r["certificate_id"] for r in imported}
    # Revoked through the device's own endpoint, the one the list's rows lead to.
    assert client.delete(f"/api/v1/devices/b/certificates/{by_device['b']}").status_code == 204
    # Registration refuses an expired certificate: one registered earlier has run out since.
    DeviceCertificate.objects.filter(id=by_device["c"]).update(
        not_after=timezone.now() - timedelta(days=1)
    )
    rows = client.get("/api/v1/certificates").json()["results"]
    assert {row["device"]: row["status"] for row in rows} == {
        "a": "active",
        "b": "revoked",
        "c": "expired",
    }
    for status in identity.CERTIFICATE_STATUSES:
        page = client.get(f"/api/v1/certificates?status={status}").json()
        assert [row["status"] for row in page["results"]] == [status]
    assert client.get("/api/v1/certificates?status=bogus").status_code == 400
    assert client.get("/api/v1/certificates?device=a").json()["count"] == 1
    first = client.get("/api/v1/certificates?limit=2").json()
    second = client.get("/api/v1/certificates?limit=2&offset=2").json()
    assert first["count"] == 3 and first["next"] and len(first["results"]) == 2
    seen = [row["id"] for row in first["results"] + second["results"]]
    assert sorted(seen) == sorted(by_device.values())


def test_another_tenants_certificates_are_404s_from_the_attackers_side(acme, attacker):
    tenant, client = acme
    evil_tenant, evil = attacker
    device_services.device_create(tenant=tenant, name="lamp")
    device_services.device_create(tenant=evil_tenant, name="lamp")  # the same name, its own
    pem = leaf_pem("lamp")
    [mine] = client.post(IMPORT, {"certificates": [pem]}, format="json").json()["results"]
    victim_id = mine["certificate_id"]
    assert evil.get("/api/v1/certificates").json()["count"] == 0
    assert evil.get("/api/v1/certificates?device=lamp").json()["count"] == 0
    assert evil.delete(f"/api/v1/devices/lamp/certificates/{victim_id}").status_code == 404
    # Importing the victim's (public) certificate into its own tenant gains nothing: it is its
    # own registration, and the victim's stays active.
    [theirs] = evil.post(IMPORT, {"certificates": [pem]}, format="json").json()["results"]
    assert theirs["status"] == "registered" and theirs["certificate_id"] != victim_id
    assert client.get("/api/v1/certificates").json()["results"][0]["status"] == "active"
    assert evil.get("/api/v1/certificates").json()["count"] == 1

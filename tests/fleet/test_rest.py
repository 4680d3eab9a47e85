"""The REST API of fleet provisioning: templates (made, listed, read, deleted; a bad one is a
400 naming the field), claim certificates (issued once with their key, signed by the tenant's
fleet CA, listed without it, revoked), and other tenants kept out (404)."""

from __future__ import annotations

import pytest
from cryptography import x509

from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.shadows.conftest import api_client

pytestmark = pytest.mark.django_db(transaction=True)

TEMPLATES = "/api/v1/provisioning-templates"
TEMPLATE = {
    "name": "sensors",
    "device_name_template": "sensor-{SerialNumber}",
    "acl_rules": [{"action": "both", "permission": "allow", "topic": "sensors/${client}/#"}],
}


def test_templates_and_claims_of_a_tenant_and_no_other():
    owner = api_client(tenant_services.tenant_create("fleet-rest-a"))
    stranger = api_client(tenant_services.tenant_create("fleet-rest-b"))

    made = owner.post(TEMPLATES, TEMPLATE, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["parameters"] == ["SerialNumber"]
    assert owner.get(f"{TEMPLATES}/sensors").json()["device_name_template"] == (
        "sensor-{SerialNumber}"
    )
    assert [t["name"] for t in owner.get(TEMPLATES).json()["results"]] == ["sensors"]
    again = owner.post(TEMPLATES, TEMPLATE, format="json")
    assert again.status_code == 400 and "name" in again.json()["error"]["fields"]

    claim = owner.post(f"{TEMPLATES}/sensors/claims")
    assert claim.status_code == 201, claim.content
    body = claim.json()
    cert = x509.load_pem_x509_certificate(body["certificate_pem"].encode())
    ca = x509.load_pem_x509_certificate(body["ca_pem"].encode())
    cert.verify_directly_issued_by(ca)  # signed by the tenant's fleet CA
    assert "PRIVATE KEY" in body["private_key"] and len(body["certificate_id"]) == 64
    listed = owner.get(f"{TEMPLATES}/sensors/claims").json()["results"]
    assert [c["certificate_id"] for c in listed] == [body["certificate_id"]]
    assert "private_key" not in listed[0]  # shown once
    # The fleet CA is one of the tenant's CAs (the TLS listener lets its certificates through).
    assert "fleet-provisioning" in [c["name"] for c in owner.get("/api/v1/cas").json()["results"]]

    # Another tenant sees nothing of it, by name or by certificate.
    assert stranger.get(f"{TEMPLATES}/sensors").status_code == 404
    assert stranger.get(TEMPLATES).json()["results"] == []
    assert stranger.post(f"{TEMPLATES}/sensors/claims").status_code == 404
    claim_url = f"{TEMPLATES}/sensors/claims/{body['certificate_id']}"
    assert stranger.delete(claim_url).status_code == 404
    assert stranger.delete(f"{TEMPLATES}/sensors").status_code == 404

    # The tenant may revoke its fleet CA (its devices stop); the next claim gets a new one.
    assert owner.delete("/api/v1/cas/fleet-provisioning").status_code == 204
    renewed = owner.post(f"{TEMPLATES}/sensors/claims").json()
    assert renewed["ca_pem"] != body["ca_pem"]
    live = [c for c in owner.get("/api/v1/cas").json()["results"] if not c["revoked_at"]]
    assert [c["pem"] for c in live] == [renewed["ca_pem"]]

    assert owner.delete(claim_url).status_code == 204
    claims = owner.get(f"{TEMPLATES}/sensors/claims").json()["results"]
    assert [c["certificate_id"] for c in claims if c["revoked_at"]] == [body["certificate_id"]]
    assert owner.delete(f"{TEMPLATES}/sensors").status_code == 204
    assert owner.get(f"{TEMPLATES}/sensors").status_code == 404


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"device_name_template": "sensor"}, "device_name_template"),
        ({"device_name_template": "sensor/{Serial}"}, "device_name_template"),
        ({"device_name_template": "sensor-{Serial"}, "device_name_template"),
        ({"device_name_template": "sensor-{a:{b}}"}, "device_name_template"),
        ({"device_name_template": "sensor-{a!r}"}, "device_name_template"),
        ({"acl_rules": [{"action": "jump", "permission": "allow", "topic": "a"}]}, "acl_rules"),
        ({"name": "bad name"}, "name"),
        ({"pre_provisioning_hook_url": "not a url"}, "pre_provisioning_hook_url"),
    ],
)
def test_a_bad_template_is_a_400_naming_the_field(change, field):
    owner = api_client(tenant_services.tenant_create("fleet-rest-bad"))
    response = owner.post(TEMPLATES, {**TEMPLATE, **change}, format="json")
    assert response.status_code == 400, response.content
    assert field in str(response.json()["error"])


def test_certificates_never_registered_are_purged():
    from datetime import timedelta

    from django.utils import timezone

    from tenants.fleet import services as fleet
    from tenants.models import FleetCertificate

    tenant = tenant_services.tenant_create("fleet-purge")
    template = fleet.template_create(tenant=tenant, name="t", device_name_template="d-{Serial}")
    claim = fleet.claim_create(template).certificate
    device = device_services.device_create(tenant=tenant, name="d-1")[0]
    long_ago = timezone.now() - timedelta(days=2)
    common = dict(tenant=tenant, kind="device", template=template, pem="x", not_after=long_ago)
    stale = FleetCertificate.objects.create(
        certificate_id="a" * 64, token_expires_at=long_ago, **common
    )
    fresh = FleetCertificate.objects.create(
        certificate_id="b" * 64, token_expires_at=timezone.now(), **common
    )
    bound = FleetCertificate.objects.create(certificate_id="c" * 64, device=device, **common)
    assert fleet.unregistered_certificates_purge() == 1
    left = set(FleetCertificate.objects.filter(tenant=tenant).values_list("id", flat=True))
    assert left == {claim.id, fresh.id, bound.id} and stale.id not in left


def test_template_groups_are_the_tenants_own_and_an_unknown_one_is_named():
    owner = api_client(tenant_services.tenant_create("fleet-groups-a"))
    attacker = api_client(tenant_services.tenant_create("fleet-groups-b"))
    assert owner.post("/api/v1/groups", {"name": "line-3"}, format="json").status_code == 201
    assert attacker.post("/api/v1/groups", {"name": "stolen"}, format="json").status_code == 201

    made = owner.post(TEMPLATES, {**TEMPLATE, "groups": ["line-3"]}, format="json")
    assert made.status_code == 201, made.content
    assert made.json()["groups"] == ["line-3"]
    unknown = owner.post(
        TEMPLATES, {**TEMPLATE, "name": "other", "groups": ["line-3", "nope"]}, format="json"
    )
    assert unknown.status_code == 400
    assert "Unknown groups: nope." in str(unknown.json()["error"]["fields"]["groups"])
    # Another tenant's group is one the owner has none of, when created or updated.
    foreign = owner.patch(f"{TEMPLATES}/sensors", {"groups": ["stolen"]}, format="json")
    assert foreign.status_code == 400 and "stolen" in str(foreign.json()["error"])
    assert owner.get(f"{TEMPLATES}/sensors").json()["groups"] == ["line-3"]  # unchanged
    bad = owner.patch(f"{TEMPLATES}/sensors", {"groups": "line-3"}, format="json")
    assert bad.status_code == 400 and "groups" in str(bad.json()["error"])
    renamed = owner.patch(f"{TEMPLATES}/sensors", {"name": "x"}, format="json")
    assert renamed.status_code == 400

    assert owner.post("/api/v1/groups", {"name": "beta"}, format="json").status_code == 201
    updated = owner.patch(
        f"{TEMPLATES}/sensors", {"groups": ["beta", "line-3"], "enabled": False}, format="json"
    )
    assert updated.status_code == 200, updated.content
    assert (updated.json()["groups"], updated.json()["enabled"]) == (["beta", "line-3"], False)
    # The attacker can neither see nor change the owner's template, nor put its groups in one.
    assert attacker.patch(f"{TEMPLATES}/sensors", {"groups": []}, format="json").status_code == 404
    attacker_made = attacker.post(TEMPLATES, {**TEMPLATE, "groups": ["line-3"]}, format="json")
    assert attacker_made.status_code == 400
    # A group deleted later drops out of the template (its devices stay, as ever).
    assert owner.delete("/api/v1/groups/beta").status_code == 204
    assert owner.get(f"{TEMPLATES}/sensors").json()["groups"] == ["line-3"]

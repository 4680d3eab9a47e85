"""`max_certificates` from the attacker's side (issue 44 point 4): a claim asking for certificates
over MQTT until the tenant's live certificates reach the limit gets AWS's rejected body
(LimitExceeded) and nothing more is kept; the REST API refuses a further claim or device
certificate with a 400 naming the quota, in the bulk import as one refused item."""

from __future__ import annotations

import pytest

from common.security.device_credentials import make_leaf, pem_of
from tenants.devices import services as device_services
from tenants.fleet import services as fleet
from tenants.models import FleetCertificate
from tenants.tenant import services as tenant_services
from tenants.tenant.stored_limits import certificates_count
from tests.fleet.test_attacker import CREATE, ask, claimer
from tests.shadows.conftest import api_client

pytestmark = pytest.mark.django_db(transaction=True)


def test_certificates_past_max_certificates_are_refused(tls_broker, claim):
    tenant = claim.tenant
    # The fleet CA and the claim are two; room for two more.
    assert certificates_count(tenant.id) == 2
    tenant_services.tenant_set_quota(tenant, {"max_certificates": 4})
    client = claimer(tls_broker, claim)
    try:
        for _ in range(2):
            outcome, body = ask(client, CREATE, {})
            assert outcome == "accepted" and body["certificateOwnershipToken"]
        outcome, body = ask(client, CREATE, {})
        assert outcome == "rejected"
        assert (body["statusCode"], body["errorCode"]) == (403, "LimitExceeded")
        assert "max_certificates" in body["errorMessage"]
        assert "privateKey" not in body
    finally:
        client.close()
    assert FleetCertificate.objects.filter(tenant=tenant, kind="device").count() == 2

    owner = api_client(tenant)
    refused = owner.post(f"/api/v1/provisioning-templates/{claim.template.name}/claims")
    assert refused.status_code == 400, refused.content
    assert "max_certificates" in refused.content.decode()
    device_services.device_create(tenant=tenant, name="lamp")
    pem = pem_of(make_leaf("lamp", None, None)[0])
    refused = owner.post("/api/v1/devices/lamp/certificates", {"pem": pem}, format="json")
    assert refused.status_code == 400 and "max_certificates" in refused.content.decode()
    imported = owner.post("/api/v1/certificates/import", {"certificates": [pem]}, format="json")
    [result] = imported.json()["results"]
    assert result["status"] == "error" and "max_certificates" in result["error"]

    # Revoking one makes room again.
    fleet.claim_revoke(fleet.claim_get(claim.template, claim.certificate_id))
    made = owner.post("/api/v1/devices/lamp/certificates", {"pem": pem}, format="json")
    assert made.status_code == 201, made.content

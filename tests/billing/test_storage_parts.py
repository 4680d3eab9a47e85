"""Every stored byte counted (issue 44, point 4): a tenant's device shadows, their history and
its certificates are part of the hourly storage sample, each part exactly what Postgres keeps,
and the tenant sees them in its usage (storage byte-hours); another tenant's are not its own."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from common.stores.object_store import LocalObjectStore
from tenants.devices import services as device_services
from tenants.fleet import services as fleet_services
from tenants.models import CaCertificate, FleetCertificate, Shadow, ShadowVersion
from tenants.shadows import services as shadow_services
from tenants.tenant import services as tenant_services
from tenants.usage.storage import storage_sample
from tests.shadows.conftest import api_client

pytestmark = pytest.mark.django_db(transaction=True)


def _json(value) -> int:
    """Postgres's text of a jsonb value has json.dumps's separators (`, ` and `: `)."""
    return 0 if value is None else len(json.dumps(value).encode())


def test_shadows_history_and_certificates_are_stored_bytes_the_tenant_pays_for(tmp_path):
    acme = tenant_services.tenant_create("acme-store")
    other = tenant_services.tenant_create("other-store")
    lamp, _ = device_services.device_create(tenant=acme, name="lamp")
    theirs, _ = device_services.device_create(tenant=other, name="lamp")
    for i in range(5):  # the classic shadow, five versions
        shadow_services.shadow_update(
            device=lamp,
            name="",
            payload=json.dumps({"state": {"reported": {"t": i, "pad": "x" * 900}}}).encode(),
            if_match=None,
            actor="app",
        )
    shadow_services.shadow_update(
        device=lamp,
        name="firmware",
        payload=b'{"state":{"desired":{"v":"2.1"}}}',
        if_match=None,
        actor="app",
    )
    shadow_services.shadow_update(
        device=theirs,
        name="",
        payload=b'{"state":{"desired":{"on":true}}}',
        if_match=None,
        actor="app",
    )
    template = fleet_services.template_create(
        tenant=acme, name="sensors", device_name_template="sensor-{Serial}"
    )
    fleet_services.claim_create(template)
    fleet_services.claim_create(template)

    now = datetime.now(UTC)
    result = storage_sample(now=now, store=LocalObjectStore(tmp_path))
    assert result["state"] == "sampled"
    parts = result["tenants"]["acme-store"]

    shadows = sum(
        len(s.name) + _json(s.state) + _json(s.metadata) for s in Shadow.objects.filter(tenant=acme)
    )
    history = sum(
        _json(v.state)
        + _json(v.metadata)
        + _json(v.request)
        + _json(v.replies)
        + len(v.client_token)
        + len(v.actor)
        for v in ShadowVersion.objects.filter(tenant=acme)
    )
    certificates = sum(
        len(c.pem) + 64 + len(c.subject) for c in CaCertificate.objects.filter(tenant=acme)
    ) + sum(
        len(c.pem) + 64 + len(c.ownership_token)
        for c in FleetCertificate.objects.filter(tenant=acme)
    )
    assert parts["shadows"] == shadows > 5_000 // 5  # the last of the 900-byte reports
    assert parts["shadow_history"] == history > 5 * 900  # every version kept, replies too
    assert parts["certificates"] == certificates > 2 * 500  # the fleet CA and two claims
    assert FleetCertificate.objects.filter(tenant=acme).count() == 2
    assert result["tenants"]["other-store"]["shadow_history"] < 1_000  # its own one change
    stored = sum(parts.values())

    # The tenant sees them in its usage: the hour's storage byte-hours.
    hour = now.replace(minute=0, second=0, microsecond=0)
    start = hour.isoformat().replace("+00:00", "Z")
    end = (hour + timedelta(hours=1)).isoformat().replace("+00:00", "Z")
    answer = api_client(acme).get(f"/api/v1/usage?from={start}&to={end}&granularity=hour")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    rows = body["results"] if isinstance(body, dict) and "results" in body else body
    text = json.dumps(rows)
    assert str(stored) in text, text

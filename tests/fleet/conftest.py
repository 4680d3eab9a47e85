"""Fleet provisioning end to end: the TLS broker of the shadow tests (a real broker process on
the test database), and a tenant with a provisioning template and a claim certificate on disk."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tenants.fleet import services as fleet
from tenants.tenant import services as tenant_services
from tests.shadows.conftest import TlsBroker, start_tls_broker


@pytest.fixture(scope="package")
def tls_broker(tmp_path_factory, django_db_setup, django_db_blocker) -> Iterator[TlsBroker]:
    # The pre-provisioning hooks of the tests listen on loopback (as an operator allows one).
    with django_db_blocker.unblock(), pytest.MonkeyPatch.context() as patch:
        patch.setenv("WEBHOOK_ALLOW", "127.0.0.1")
        broker = start_tls_broker(tmp_path_factory.mktemp("fleet-broker"))
    yield broker
    broker.stop()


@dataclass
class Claim:
    tenant: object
    template: object
    certificate_id: str
    cert: str  # paths
    key: str


def make_claim(folder: Path, template: str = "sensors", **fields) -> Claim:
    tenant = tenant_services.tenant_create(f"fl{uuid.uuid4().hex[:8]}")
    made = fleet.template_create(
        tenant=tenant,
        name=template,
        device_name_template="sensor-{SerialNumber}",
        acl_rules=[{"action": "both", "permission": "allow", "topic": "sensors/${client}/#"}],
        **fields,
    )
    issued = fleet.claim_create(made)
    stem = folder / f"{tenant.slug}-claim"
    Path(f"{stem}.pem").write_text(issued.certificate.pem)
    Path(f"{stem}.key").write_text(issued.private_key)
    return Claim(tenant, made, issued.certificate.certificate_id, f"{stem}.pem", f"{stem}.key")


@pytest.fixture
def claim(tmp_path) -> Claim:
    return make_claim(tmp_path)

"""The demo tenant and device `make run` prints: made once, their password kept as given."""

from __future__ import annotations

from django.db import transaction

from common.contracts.notifications import ChangeKind
from common.security import secrets
from tenants.devices.services import device_create
from tenants.models import (
    Credential,
    Device,
    Tenant,
)
from tenants.notify import announce
from tenants.tenant.services import tenant_create


def demo_seed(*, tenant_slug: str = "demo", device_name: str = "demo-device", password: str):
    """Idempotently ensure the demo tenant and device of `make run` exist with `password`."""
    with transaction.atomic():
        tenant = Tenant.objects.filter(slug=tenant_slug).first() or tenant_create(tenant_slug)
        device = Device.objects.filter(tenant=tenant, name=device_name).first()
        if device is None:
            device, _ = device_create(
                tenant=tenant,
                name=device_name,
                password=password,
                client_id_policy=Device.ClientIdPolicy.ANY,
            )
        elif not any(
            secrets.verify_secret(password, c.secret_hash)
            for c in device.credentials.filter(revoked_at=None)
        ):
            Credential.objects.create(
                device=device,
                secret_hash=secrets.hash_secret(password),
                scram_verifier=secrets.scram_verifier(password),
            )
            announce(tenant.slug, ChangeKind.CREDENTIAL_CREATED, device=device.name)
    return tenant, device

"""The stored-bytes limits the control plane enforces (issue 44 point 4): `max_shadows` (device
shadows, classic and named, a tenant keeps) and `max_certificates` (its live certificates: CAs,
devices' registered certificates, and those its fleet CA issued). The broker enforces the same
counts on its own writes (`data_plane.shadows.store`, `data_plane.fleet.store`).

A certificate refused is a `ValidationError` naming the quota key (the REST API answers 400), a
shadow refused AWS's 403 error document (`common.shadow.document.shadow_limit`, by
`tenants.shadows.services`): the caller is told at once. The broker's refusals are also counted
as `quota_shadows` / `quota_certificates` drops in the tenant's usage minutes."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import connection

from tenants.models import Tenant
from tenants.tenant.selectors import effective_quota

_SHADOWS = "SELECT count(*) FROM tenants_shadow WHERE tenant_id = %s AND present"
_CERTIFICATES = """
SELECT (SELECT count(*) FROM tenants_cacertificate WHERE tenant_id = %s AND revoked_at IS NULL)
     + (SELECT count(*) FROM tenants_devicecertificate
         WHERE tenant_id = %s AND revoked_at IS NULL)
     + (SELECT count(*) FROM tenants_fleetcertificate WHERE tenant_id = %s AND revoked_at IS NULL)
"""


def shadows_count(tenant_id: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(_SHADOWS, [tenant_id])
        return int(cursor.fetchone()[0])


def certificates_count(tenant_id: int) -> int:
    with connection.cursor() as cursor:
        cursor.execute(_CERTIFICATES, [tenant_id] * 3)
        return int(cursor.fetchone()[0])


def require_certificate_room(tenant: Tenant, field: str = "pem", adding: int = 1) -> None:
    """Raise (400) when `adding` more live certificates would pass `max_certificates`."""
    most = effective_quota(tenant).get("max_certificates")
    if most is None or certificates_count(tenant.id) + adding <= most:
        return
    raise ValidationError(
        {
            field: [
                f"Your plan ({tenant.plan.name}) allows {most} live certificates "
                "(max_certificates): revoke ones you no longer use first."
            ]
        }
    )

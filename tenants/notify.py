"""Change notifications for the broker.

Every write that changes what the broker enforces calls `announce()`. It issues `pg_notify` on the
single channel `settings.CONFIG_NOTIFY_CHANNEL` ("mqtt_config") inside the caller's transaction,
so Postgres delivers it only when that transaction commits, and never if it rolls back.

Payload (JSON, well under Postgres' 8000-byte limit):

    {"tenant": "acme", "kind": "device.disabled", "device": "sensor-1", "ids": [42]}

kinds: tenant.status, tenant.quota, device.created, device.updated, device.enabled,
device.disabled, device.deleted, credential.created, credential.rotated, credential.revoked,
credential.expired, acl.changed, identity.ca_added, identity.ca_revoked, identity.cert_added,
identity.cert_revoked, identity.jwt_key_added, identity.jwt_key_revoked (`ids`: the CA, device
certificate or JWT key rows; see `tenants/identity.py`). `device` and `ids` are present where they
apply.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.db import connection, transaction


def announce(tenant: str, kind: str, *, device: str | None = None, ids: list[int] | None = None):
    payload: dict[str, object] = {"tenant": tenant, "kind": kind}
    if device is not None:
        payload["device"] = device
    if ids:
        payload["ids"] = ids
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_notify(%s, %s)",
            [settings.CONFIG_NOTIFY_CHANNEL, json.dumps(payload, separators=(",", ":"))],
        )

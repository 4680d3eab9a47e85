"""Certificates the tenants' fleet CAs issued (`tenants.fleet.services`), at CONNECT: every one of them has
the CN `common.fleet.pki.FLEET_CN` and is known by its SHA-256 (AWS's certificateId), read here
uncached (provisioning is rare, and a revoked claim must stop at once).

- A claim certificate connects as a claim of its template: `ClaimAuthorizer` lets it publish the
  fleet provisioning requests of that template and subscribe to their replies, nothing else (no
  topic of the tenant, no shadow).
- A device's certificate (created over MQTT) connects as its device once RegisterThing bound it.

Just-in-time registration is here too: a certificate of a tenant's registered CA that has it on,
naming a device not yet known, makes that device (`auto_register`)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from common.contracts import tables
from common.contracts.notifications import CHANNEL, ChangeKind
from common.fleet import topics

_CERTIFICATE_SQL = f"""
SELECT c.id, c.certificate_id, c.kind, t.slug, c.revoked_at IS NOT NULL, c.template_id, p.name,
       COALESCE(p.enabled, false), d.name
  FROM {tables.FLEET_CERTIFICATE} c
  JOIN {tables.TENANT} t ON t.id = c.tenant_id
  LEFT JOIN {tables.PROVISIONING_TEMPLATE} p ON p.id = c.template_id
  LEFT JOIN {tables.DEVICE} d ON d.id = c.device_id
 WHERE c.certificate_id = %s
"""


@dataclass(frozen=True, slots=True)
class FleetCertificate:
    id: int
    certificate_id: str
    kind: str  # claim | device
    tenant: str
    revoked: bool
    template_id: int | None
    template: str | None
    template_enabled: bool
    device: str | None  # a device certificate's device, once registered


async def fleet_certificate(pool: AsyncConnectionPool, certificate_id: str):
    """The issued certificate of this SHA-256, or None."""
    async with pool.connection() as conn:
        cursor = conn.cursor(row_factory=tuple_row)
        row = await (await cursor.execute(_CERTIFICATE_SQL, (certificate_id,))).fetchone()
    return FleetCertificate(*row) if row is not None else None


class ClaimAuthorizer:
    """What a claim certificate may do: its template's fleet provisioning requests and their
    replies. It also names the claim, for the provisioning service."""

    filters_reads = False
    fixed = True  # a change of the tenant's policy does not replace it (`broker.policy`)

    def __init__(self, certificate_id: str, template_id: int, template: str) -> None:
        self.certificate_id, self.template_id, self.template = (
            certificate_id,
            template_id,
            template,
        )

    def _mine(self, topic: str, *, as_filter: bool) -> topics.FleetTopic | None:
        parsed = topics.parse(topic, as_filter=as_filter)
        if parsed is None or (parsed.template and parsed.template != self.template):
            return None
        return parsed

    def can_publish(self, topic: str) -> bool:
        parsed = self._mine(topic, as_filter=False)
        return parsed is not None and not parsed.reply

    def can_subscribe(self, topic_filter: str) -> bool:
        parsed = self._mine(topic_filter, as_filter=True)
        return parsed is not None and bool(parsed.reply)

    def can_receive(self, topic: str) -> bool:
        parsed = self._mine(topic, as_filter=False)
        return parsed is not None and bool(parsed.reply)


# -- just-in-time registration ---------------------------------------------------------------

_AUTO_REGISTER_SQL = f"""
INSERT INTO {tables.DEVICE}
  (tenant_id, name, enabled, client_id_policy, client_id_pattern, attributes, created_at,
   last_disconnect_reason)
SELECT c.tenant_id, %s, true, 'exact', '', '{{}}'::jsonb, now(), ''
  FROM {tables.CA_CERTIFICATE} c JOIN {tables.TENANT} t ON t.id = c.tenant_id
 WHERE c.id = %s AND t.slug = %s AND c.auto_registration AND c.revoked_at IS NULL
   AND t.status = 'active'
ON CONFLICT DO NOTHING
RETURNING id
"""
DEVICE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")  # tenants.models' validator


async def auto_register(pool: AsyncConnectionPool, ca_id: int, tenant: str, device: str) -> bool:
    """Make device `device` of `tenant` if the registered CA `ca_id` (which signed its
    certificate) has just-in-time registration on; announced as the control plane announces
    a new device. True if it was made."""
    if not DEVICE_NAME.match(device):
        return False
    async with pool.connection() as conn, conn.transaction():
        cursor = conn.cursor(row_factory=tuple_row)
        row = await (await cursor.execute(_AUTO_REGISTER_SQL, (device, ca_id, tenant))).fetchone()
        if row is None:
            return False
        payload = {"tenant": tenant, "kind": str(ChangeKind.DEVICE_CREATED), "device": device}
        payload["ids"] = [row[0]]
        await cursor.execute(
            "SELECT pg_notify(%s, %s)", (CHANNEL, json.dumps(payload, separators=(",", ":")))
        )
    return True

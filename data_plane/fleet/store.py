"""The fleet provisioning service's reads and writes of the control plane's tables
(`tenants.models`), in SQL: the tenant's fleet CA, the certificates it issues, and the
device RegisterThing makes (with its ACL rules and its template's groups, announced as the control plane announces its
own changes, so every broker's caches learn of it)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from common.contracts import tables
from common.contracts.notifications import CHANNEL, ChangeKind

_AUTHORITY_SQL = f"""
SELECT t.id, c.pem, a.key
  FROM {tables.FLEET_AUTHORITY} a
  JOIN {tables.TENANT} t ON t.id = a.tenant_id
  JOIN {tables.CA_CERTIFICATE} c ON c.id = a.ca_id
 WHERE t.slug = %s AND c.revoked_at IS NULL AND t.status = 'active'
"""
_CLAIM_LIVE_SQL = f"""
SELECT p.id, p.device_name_template, p.acl_rules, p.attributes, p.pre_provisioning_hook_url
  FROM {tables.FLEET_CERTIFICATE} c JOIN {tables.PROVISIONING_TEMPLATE} p ON p.id = c.template_id
 WHERE c.certificate_id = %s AND c.kind = 'claim' AND c.revoked_at IS NULL AND p.enabled
"""
_INSERT_CERTIFICATE_SQL = f"""
INSERT INTO {tables.FLEET_CERTIFICATE}
  (tenant_id, kind, certificate_id, template_id, pem, ownership_token, token_expires_at,
   not_after, created_at)
VALUES (%s, 'device', %s, %s, %s, %s, %s, %s, now())
"""
# The same, only while the tenant's live certificates are fewer than its `max_certificates`
# (`tenants.tenant.stored_limits` counts them the same way for the REST API).
_INSERT_CERTIFICATE_WITHIN_SQL = f"""
INSERT INTO {tables.FLEET_CERTIFICATE}
  (tenant_id, kind, certificate_id, template_id, pem, ownership_token, token_expires_at,
   not_after, created_at)
SELECT %(tenant)s, 'device', %(id)s, %(template)s, %(pem)s, %(token)s, %(expires)s, %(not_after)s,
       now()
 WHERE (SELECT count(*) FROM {tables.CA_CERTIFICATE}
         WHERE tenant_id = %(tenant)s AND revoked_at IS NULL)
     + (SELECT count(*) FROM {tables.DEVICE_CERTIFICATE}
         WHERE tenant_id = %(tenant)s AND revoked_at IS NULL)
     + (SELECT count(*) FROM {tables.FLEET_CERTIFICATE}
         WHERE tenant_id = %(tenant)s AND revoked_at IS NULL) < %(most)s
"""
_TAKE_TOKEN_SQL = f"""
SELECT id FROM {tables.FLEET_CERTIFICATE}
 WHERE ownership_token = %s AND tenant_id = %s AND template_id = %s AND kind = 'device'
   AND device_id IS NULL AND revoked_at IS NULL AND token_expires_at > now()
   FOR UPDATE
"""
_INSERT_DEVICE_SQL = f"""
INSERT INTO {tables.DEVICE}
  (tenant_id, name, enabled, client_id_policy, client_id_pattern, attributes, created_at,
   last_disconnect_reason)
VALUES (%s, %s, true, 'exact', '', %s, now(), '')
ON CONFLICT DO NOTHING
RETURNING id
"""
_INSERT_ACL_SQL = f"""
INSERT INTO {tables.ACL_RULE} (tenant_id, device_id, action, permission, topic, position, created_at)
VALUES (%s, %s, %s, %s, %s, %s, now())
"""
# The new device joins the template's groups (the tenant's own: `tenants.fleet.services` checks them).
_JOIN_GROUPS_SQL = f"""
INSERT INTO {tables.DEVICE_GROUP_DEVICES} (devicegroup_id, device_id)
SELECT devicegroup_id, %s FROM {tables.PROVISIONING_TEMPLATE_GROUPS}
 WHERE provisioningtemplate_id = %s
ON CONFLICT DO NOTHING
"""
_BIND_SQL = f"""
UPDATE {tables.FLEET_CERTIFICATE} SET device_id = %s, ownership_token = '', token_expires_at = NULL
 WHERE id = %s
"""


@dataclass(frozen=True, slots=True)
class Authority:
    tenant_id: int
    ca_pem: str
    sealed_key: str


@dataclass(frozen=True, slots=True)
class Template:
    id: int
    device_name_template: str
    acl_rules: list
    attributes: dict
    hook_url: str


class DeviceExists(Exception):
    pass


class FleetStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def _one(self, sql: str, args: tuple):
        async with self.pool.connection() as conn:
            cursor = conn.cursor(row_factory=tuple_row)
            return await (await cursor.execute(sql, args)).fetchone()

    async def authority(self, tenant: str) -> Authority | None:
        row = await self._one(_AUTHORITY_SQL, (tenant,))
        return Authority(*row) if row is not None else None

    async def live_claim(self, certificate_id: str) -> Template | None:
        """The claim's template, while the claim is not revoked and the template enabled."""
        row = await self._one(_CLAIM_LIVE_SQL, (certificate_id,))
        return Template(*row) if row is not None else None

    async def add_certificate(
        self,
        tenant_id: int,
        certificate_id: str,
        template_id: int,
        pem: str,
        token_hash: str,
        token_expires_at: datetime,
        not_after: datetime,
        max_certificates: int | None = None,
    ) -> bool:
        """Keep a certificate the fleet CA issued; False (nothing kept) when the tenant's live
        certificates are at `max_certificates` already."""
        async with self.pool.connection() as conn:
            if max_certificates is not None:
                cursor = await conn.execute(
                    _INSERT_CERTIFICATE_WITHIN_SQL,
                    {
                        "tenant": tenant_id,
                        "id": certificate_id,
                        "template": template_id,
                        "pem": pem,
                        "token": token_hash,
                        "expires": token_expires_at,
                        "not_after": not_after,
                        "most": max_certificates,
                    },
                )
                return cursor.rowcount == 1
            await conn.execute(
                _INSERT_CERTIFICATE_SQL,
                (
                    tenant_id,
                    certificate_id,
                    template_id,
                    pem,
                    token_hash,
                    token_expires_at,
                    not_after,
                ),
            )
            return True

    async def register_thing(
        self, tenant: str, tenant_id: int, template: Template, token_hash: str, name: str
    ) -> bool:
        """Bind the certificate of this ownership token to a new device `name` made from the
        template (its ACL rules, attributes and groups); False if no live token of this tenant and template is that one. Raises
        DeviceExists: a claim, which a whole fleet shares, never takes over a device."""
        async with self.pool.connection() as conn, conn.transaction():
            cursor = conn.cursor(row_factory=tuple_row)
            row = await (
                await cursor.execute(_TAKE_TOKEN_SQL, (token_hash, tenant_id, template.id))
            ).fetchone()
            if row is None:
                return False
            made = await (
                await cursor.execute(
                    _INSERT_DEVICE_SQL, (tenant_id, name, json.dumps(template.attributes))
                )
            ).fetchone()
            if made is None:
                raise DeviceExists(name)
            device_id = made[0]
            for position, rule in enumerate(template.acl_rules):
                await cursor.execute(
                    _INSERT_ACL_SQL,
                    (
                        tenant_id,
                        device_id,
                        rule["action"],
                        rule["permission"],
                        rule["topic"],
                        position,
                    ),
                )
            await cursor.execute(_JOIN_GROUPS_SQL, (device_id, template.id))
            await cursor.execute(_BIND_SQL, (device_id, row[0]))
            for kind, ids in (
                (ChangeKind.DEVICE_CREATED, [device_id]),
                (ChangeKind.ACL_CHANGED, []),
            ):
                payload = {"tenant": tenant, "kind": str(kind), "device": name}
                if ids:
                    payload["ids"] = ids
                await cursor.execute(
                    "SELECT pg_notify(%s, %s)",
                    (CHANNEL, json.dumps(payload, separators=(",", ":"))),
                )
        return True

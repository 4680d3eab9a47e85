"""Reads of the control plane's tables (owned by Django's `tenants` app) with psycopg's async pool.

One round trip per question; the authenticator caches the answers and the notification listener
tells it when to forget them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from common.access.acl import AclEntry, AclPolicy
from common.contracts import tables
from common.contracts.quota_keys import QUOTA_KEYS
from data_plane.tenancy import service_identity

QUOTA_COLUMNS = QUOTA_KEYS


@dataclass(slots=True)
class CredentialRecord:
    id: int
    secret_hash: str
    expires_at: datetime | None
    scram_verifier: str = ""


@dataclass(slots=True)
class DeviceRecord:
    tenant_id: int
    tenant: str
    tenant_active: bool
    device_id: int | None  # None: no such device in that tenant
    name: str
    enabled: bool = False
    client_id_policy: str = "exact"
    client_id_pattern: str = ""
    credentials: list[CredentialRecord] = field(default_factory=list)


@dataclass(slots=True)
class TenantPolicy:
    tenant_id: int
    slug: str
    active: bool
    acl_default_allow: bool
    acl: list[AclEntry]
    quota: dict[str, int]
    archive_enabled: bool = True
    queue_qos0_offline: bool = False
    # The tenant's budget says degrade and it is reached: new CONNECTs are refused.
    budget_degraded: bool = False

    def authorizer(self, tenant: str, device: str) -> AclPolicy | service_identity.Viewer:
        """The ACL one device of this tenant is held to (what a live connection re-reads); the
        read-only browser client (`$viewer`) the same, never publishing."""
        acl = AclPolicy(
            self.acl, tenant=tenant, device=device, default_allow=self.acl_default_allow
        )
        return service_identity.Viewer(acl) if device == service_identity.VIEWER_DEVICE else acl


_DEVICE_SQL = f"""
SELECT t.id, t.status, d.id, d.enabled, d.client_id_policy, d.client_id_pattern,
       c.id, c.secret_hash, c.expires_at, c.scram_verifier, c.created_at
  FROM {tables.TENANT} t
  LEFT JOIN {tables.DEVICE} d ON d.tenant_id = t.id AND d.name = %s
  LEFT JOIN {tables.CREDENTIAL} c ON c.device_id = d.id AND c.revoked_at IS NULL
 WHERE t.slug = %s
"""

_POLICY_SQL = f"""
SELECT t.id, t.status, t.acl_default, t.quota_overrides, t.archive_enabled, t.queue_qos0_offline,
       t.budget_degraded, {", ".join("p." + column for column in QUOTA_COLUMNS)}
  FROM {tables.TENANT} t JOIN {tables.PLAN} p ON p.id = t.plan_id
 WHERE t.slug = %s
"""

_ACL_SQL = f"""
SELECT r.action, r.permission, r.topic, d.name
  FROM {tables.ACL_RULE} r LEFT JOIN {tables.DEVICE} d ON d.id = r.device_id
 WHERE r.tenant_id = %s
 ORDER BY r.position, r.id
"""


class TenantStore:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def device(self, tenant: str, name: str) -> DeviceRecord | None:
        """The device with its active credentials; None when the tenant does not exist."""
        async with self.pool.connection() as conn:
            cursor = conn.cursor(row_factory=tuple_row)
            rows = await (await cursor.execute(_DEVICE_SQL, (name, tenant))).fetchall()
        if not rows:
            return None
        tenant_id, status, device_id, enabled, policy, pattern = rows[0][:6]
        record = DeviceRecord(
            tenant_id=tenant_id,
            tenant=tenant,
            tenant_active=status == "active",
            device_id=device_id,
            name=name,
            enabled=bool(enabled),
            client_id_policy=policy or "exact",
            client_id_pattern=pattern or "",
        )
        record.credentials = [
            CredentialRecord(
                id=row[6], secret_hash=row[7], expires_at=row[8], scram_verifier=row[9] or ""
            )
            for row in sorted(rows, key=lambda r: (r[10] is None, r[10]), reverse=True)
            if row[6] is not None
        ]  # newest first
        return record

    async def policy(self, tenant: str) -> TenantPolicy | None:
        async with self.pool.connection() as conn:
            cursor = conn.cursor(row_factory=tuple_row)
            row = await (await cursor.execute(_POLICY_SQL, (tenant,))).fetchone()
            if row is None:
                return None
            acl_rows = await (await cursor.execute(_ACL_SQL, (row[0],))).fetchall()
        tenant_id, status, acl_default, overrides, archive_enabled, queue_qos0 = row[:6]
        budget_degraded = row[6]
        quota = dict(zip(QUOTA_COLUMNS, row[7:], strict=True))
        for key, value in (overrides or {}).items():
            if key in quota:
                quota[key] = int(value)
        return TenantPolicy(
            tenant_id=tenant_id,
            slug=tenant,
            active=status == "active",
            acl_default_allow=acl_default != "deny",
            acl=[
                AclEntry(action=action, allow=permission == "allow", topic=topic, device=device)
                for action, permission, topic, device in acl_rows
            ],
            quota=quota,
            archive_enabled=bool(archive_enabled),
            queue_qos0_offline=bool(queue_qos0),
            budget_degraded=bool(budget_degraded),
        )

"""Writes of device shadows from the control plane (the REST API and the portal's editor).

The same semantics as a device's request on MQTT (`common.shadow.document`), under the same row
lock the broker takes (`SELECT … FOR UPDATE`), so a version check holds whichever door a change
comes through. The replies devices get on MQTT (`…/update/accepted`, `/delta`, `/documents`,
`…/delete/accepted`) are left in the change's history row for a broker to publish
(`common.shadow.announcements`); AWS publishes no `…/rejected` for a REST request (the caller has
its HTTP answer), and neither does this.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from django.db import connection, transaction
from django.utils import timezone

from common.shadow import announcements
from common.shadow import document as doc
from common.shadow.topics import ACCEPTED, DELETE, DELTA, DOCUMENTS, UPDATE, shadow_prefix
from tenants.models import Device, Shadow, ShadowVersion
from tenants.shadows.selectors import shadow_of
from tenants.tenant.selectors import effective_quota
from tenants.tenant.stored_limits import shadows_count


class PreconditionFailed(Exception):
    """`If-Match` named another version than the shadow's (HTTP 412)."""

    def __init__(self, version: int) -> None:
        super().__init__(f"the shadow is at version {version}")
        self.version = version


@dataclass(frozen=True)
class Change:
    body: dict  # the `…/accepted` document, the REST answer
    version: int  # the shadow's version after it (a delete: the version it had)


def _locked_row(device: Device, name: str) -> Shadow:
    """The shadow's row, created (version 0, not present) if it never existed, and locked."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tenants_shadow (tenant_id, device_id, name, version, present, state,"
            " metadata, created_at, updated_at) VALUES (%s, %s, %s, 0, false, '{}', '{}', now(),"
            " now()) ON CONFLICT (device_id, name) DO NOTHING",
            [device.tenant_id, device.id, name],
        )
    return Shadow.objects.select_for_update().get(device=device, name=name)


def _check(if_match: int | None, version: int) -> None:
    if if_match is not None and if_match != version:
        raise PreconditionFailed(version)


def _announce(row: ShadowVersion) -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_notify(%s, %s)", [announcements.CHANNEL, announcements.payload(row.id)]
        )


def shadow_update(
    *, device: Device, name: str, payload: bytes, if_match: int | None, actor: str
) -> Change:
    """Apply an update request (AWS's request state document, as bytes) to the device's shadow
    `name` ("" the classic one). Raises `doc.ShadowError` (AWS's code and words) or
    `PreconditionFailed`."""
    quota = effective_quota(device.tenant)
    max_size = quota.get("max_shadow_size") or doc.DEFAULT_MAX_SIZE
    request = doc.parse_request(UPDATE, payload, max_size)
    now = int(time.time())
    with transaction.atomic():
        most = quota.get("max_shadows")
        if (
            most is not None
            and not Shadow.objects.filter(device=device, name=name, present=True).exists()
            and shadows_count(device.tenant_id) >= most
        ):
            raise doc.shadow_limit(most, request.client_token)
        row = _locked_row(device, name)
        _check(if_match, row.version)
        outcome = doc.update(shadow_of(row), request, now, max_size)
        after = outcome.after
        row.version, row.present = after.version, True
        row.state, row.metadata, row.updated_at = after.state, after.metadata, timezone.now()
        row.save(update_fields=["version", "present", "state", "metadata", "updated_at"])
        prefix = shadow_prefix(device.name, name)
        replies = [[f"{prefix}/{UPDATE}/{ACCEPTED}", outcome.accepted]]
        if outcome.delta is not None:
            replies.append([f"{prefix}/{UPDATE}/{DELTA}", outcome.delta])
        replies.append([f"{prefix}/{UPDATE}/{DOCUMENTS}", outcome.documents])
        history = ShadowVersion.objects.create(
            tenant_id=device.tenant_id,
            shadow=row,
            version=after.version,
            operation=ShadowVersion.Operation.UPDATE,
            state=after.state,
            metadata=after.metadata,
            request=None if request.clear else request.state,
            client_token=request.client_token or "",
            actor=actor,
            via="api",
            replies=replies,
        )
        prune_versions(row.id, quota.get("max_shadow_versions"))
        _announce(history)
    return Change(outcome.accepted, after.version)


# A shadow's versions past the newest `keep` (at least the newest one), but never one whose
# replies a broker has yet to publish (`published_at` null): `data_plane.shadows.store` too.
PRUNE_VERSIONS = """
DELETE FROM tenants_shadowversion v
 WHERE v.shadow_id = %(shadow)s AND v.published_at IS NOT NULL
   AND v.id < (SELECT min(w.id) FROM (SELECT id FROM tenants_shadowversion
                                       WHERE shadow_id = %(shadow)s
                                       ORDER BY id DESC LIMIT GREATEST(%(keep)s, 1)) w)
"""


def prune_versions(shadow_id: int, keep: int | None) -> None:
    """Keep the shadow's newest `keep` versions (`max_shadow_versions`), the older ones go."""
    if keep is None:
        return
    with connection.cursor() as cursor:
        cursor.execute(PRUNE_VERSIONS, {"shadow": shadow_id, "keep": keep})


def shadow_delete(*, device: Device, name: str, if_match: int | None, actor: str) -> Change:
    """Delete the device's shadow `name` (its version is kept: one made again goes on from it).
    Raises `doc.ShadowError` (404 when there is none) or `PreconditionFailed`."""
    now = int(time.time())
    with transaction.atomic():
        row = _locked_row(device, name)
        current = shadow_of(row)
        if current.present:
            _check(if_match, row.version)
        doc.delete(current, doc.Request(DELETE), device.name, name, now)
        body = doc.delete_document(row.version, now)
        row.present, row.state, row.metadata = False, {}, {}
        row.updated_at = timezone.now()
        row.save(update_fields=["present", "state", "metadata", "updated_at"])
        history = ShadowVersion.objects.create(
            tenant_id=device.tenant_id,
            shadow=row,
            version=row.version,
            operation=ShadowVersion.Operation.DELETE,
            actor=actor,
            via="api",
            replies=[[f"{shadow_prefix(device.name, name)}/{DELETE}/{ACCEPTED}", body]],
        )
        prune_versions(row.id, effective_quota(device.tenant).get("max_shadow_versions"))
        _announce(history)
    return Change(body, row.version)


def replacement(current: dict | None, wanted: dict) -> dict:
    """The update (AWS's merge, `null` deleting) that turns section `current` into `wanted`:
    what the portal's editor sends when someone rewrites the desired state whole."""
    patch: dict = {}
    current = current or {}
    for key in current:
        if key not in wanted:
            patch[key] = None
    for key, value in wanted.items():
        old = current.get(key)
        if isinstance(value, dict) and isinstance(old, dict):
            inner = replacement(old, value)
            if inner or not value:
                patch[key] = inner if value else None
        elif key not in current or old != value or type(old) is not type(value):
            patch[key] = value
    return patch


def shadow_history_purge(now=None) -> int:
    """Delete the shadow versions older than their tenant's `shadow_history_days` (overrides
    applied); returns how many went. Celery beat runs it hourly."""
    now = now or timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            """
            DELETE FROM tenants_shadowversion v
             USING tenants_tenant t JOIN tenants_plan p ON p.id = t.plan_id
             WHERE v.tenant_id = t.id
               AND v.created_at < %s - make_interval(days => COALESCE(
                     CASE WHEN jsonb_typeof(t.quota_overrides -> 'shadow_history_days')
                               = 'number'
                          THEN (t.quota_overrides ->> 'shadow_history_days')::numeric::int
                     END, p.shadow_history_days))
            """,
            [now],
        )
        return cursor.rowcount

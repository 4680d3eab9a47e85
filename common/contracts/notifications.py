"""The notification contract between the planes: one channel, one payload, a closed set of kinds.

The control plane announces every write the broker must enforce with `pg_notify(CHANNEL, payload)`
inside the writing transaction (`tenants/notify.py`), so Postgres delivers it only on commit; the
broker listens (`data_plane/tenancy/notifications.py`) and drops or re-reads what changed
(`data_plane/tenancy/control.py`). Both sides name the channel and the kinds from here, so they
cannot drift apart.

Payload (JSON, well under Postgres' 8000-byte limit):

    {"tenant": "acme", "kind": "device.disabled", "device": "sensor-1", "ids": [42]}

`device` and `ids` are present where they apply; `filter` (a topic filter) with
`retained.deleted`; `group` and `filter` with `shared_group.deleted`.
"""

from __future__ import annotations

from enum import StrEnum

CHANNEL = "mqtt_config"


class ChangeKind(StrEnum):
    TENANT_STATUS = "tenant.status"  # suspended / reactivated
    TENANT_QUOTA = "tenant.quota"  # plan or quota overrides
    TENANT_SETTINGS = "tenant.settings"  # tenant-wide settings (default ACL decision, ...)
    DEVICE_CREATED = "device.created"
    DEVICE_UPDATED = "device.updated"
    DEVICE_ENABLED = "device.enabled"
    DEVICE_DISABLED = "device.disabled"
    DEVICE_DELETED = "device.deleted"
    CREDENTIAL_CREATED = "credential.created"
    CREDENTIAL_ROTATED = "credential.rotated"
    CREDENTIAL_REVOKED = "credential.revoked"
    CREDENTIAL_EXPIRED = "credential.expired"
    ACL_CHANGED = "acl.changed"
    # Retained messages deleted (`filter`: the topic filter they matched): every node forgets
    # the ones it holds (data_plane/tenancy/retained_forget.py).
    RETAINED_DELETED = "retained.deleted"
    # A durable shared group deleted (`group`, `filter`): the node holding it drops what it
    # holds (data_plane.broker.groups); the control plane has deleted its rows.
    SHARED_GROUP_DELETED = "shared_group.deleted"
    # Device identity beyond secrets (`ids`: the CA, device certificate or JWT key rows).
    IDENTITY_CA_ADDED = "identity.ca_added"
    IDENTITY_CA_REVOKED = "identity.ca_revoked"
    IDENTITY_CERT_ADDED = "identity.cert_added"
    IDENTITY_CERT_REVOKED = "identity.cert_revoked"
    IDENTITY_JWT_KEY_ADDED = "identity.jwt_key_added"
    IDENTITY_JWT_KEY_REVOKED = "identity.jwt_key_revoked"
    # What the tenant's archive keeps may have changed: a history policy, or a rule (its FROM,
    # enabled or not) was added, changed or removed (common/archive/history_policy.py).
    HISTORY_CHANGED = "history.changed"
    # Never sent by the control plane: the broker's listener reports it after reconnecting
    # (changes may have been missed while it was away; every cache is dropped).
    RELOAD = "reload"


KINDS = frozenset(ChangeKind) - {ChangeKind.RELOAD}

# Changes that end the device's live connections.
DEVICE_REVOKING = frozenset({ChangeKind.DEVICE_DISABLED, ChangeKind.DEVICE_DELETED})
# Changes that end only the connections on a secret no longer accepted (a device may hold two
# during a rotation's grace period): the broker judges each connection.
CREDENTIAL_CHANGES = frozenset(
    {
        ChangeKind.CREDENTIAL_REVOKED,
        ChangeKind.CREDENTIAL_ROTATED,
        ChangeKind.CREDENTIAL_EXPIRED,
    }
)

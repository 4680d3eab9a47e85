"""Change notifications for the broker.

Every write that changes what the broker enforces calls `announce()`. It issues `pg_notify` on the
single channel `common.contracts.notifications.CHANNEL` ("mqtt_config") inside the caller's transaction,
so Postgres delivers it only when that transaction commits, and never if it rolls back. The
payload and the kinds are the contract in `common/contracts/notifications.py`, which the broker reads too.
"""

from __future__ import annotations

import json

from django.db import connection, transaction

from common.contracts.notifications import CHANNEL, KINDS


def announce(
    tenant: str,
    kind: str,
    *,
    device: str | None = None,
    ids: list[int] | None = None,
    topic_filter: str | None = None,
    group: str | None = None,
):
    if kind not in KINDS:  # a kind the broker does not know would be silently ignored there
        raise ValueError(f"not a change kind of common.contracts.notifications: {kind!r}")
    payload: dict[str, object] = {"tenant": tenant, "kind": str(kind)}
    if device is not None:
        payload["device"] = device
    if ids:
        payload["ids"] = ids
    if topic_filter is not None:
        payload["filter"] = topic_filter
    if group is not None:  # a shared subscription's group (`shared_group.deleted`)
        payload["group"] = group
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_notify(%s, %s)",
            [CHANNEL, json.dumps(payload, separators=(",", ":"))],
        )

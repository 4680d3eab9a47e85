"""A refusal by a quota the live rules job enforces, counted in the tenant's usage minute as the
broker counts its own (`dropped`, with a bounded cause: `quota_alarm_keys`, `quota_sink_outbox`):
the quota page and GET /api/v1/quota show it with its words (`tenants.usage.throttling_words`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import psycopg

from common.contracts import tables

_REFUSED = f"""
INSERT INTO {tables.USAGE} (tenant_id, minute, connection_seconds, messages_in, messages_out,
                           bytes_in, bytes_out, dropped, retained_count, stored_bytes)
SELECT t.id, date_trunc('minute', now()), 0, 0, 0, 0, 0,
       jsonb_build_object(%(cause)s::text, %(n)s::bigint), 0, 0
  FROM {tables.TENANT} t WHERE t.slug = %(tenant)s
ON CONFLICT (tenant_id, minute) DO UPDATE SET
  dropped = {tables.USAGE}.dropped || jsonb_build_object(%(cause)s::text,
    COALESCE(({tables.USAGE}.dropped ->> %(cause)s::text)::bigint, 0) + %(n)s::bigint)
"""


def count_refused(cur: psycopg.Cursor[Any], cause: str, refused: Mapping[str, int]) -> None:
    """Add `refused` (tenant -> how many) under `cause` to each tenant's current minute."""
    cur.executemany(
        _REFUSED, [{"cause": cause, "n": n, "tenant": t} for t, n in refused.items() if n]
    )

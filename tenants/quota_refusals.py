"""Refusals by the control plane's own limits (a plan's quota key such as `max_ca_certificates`,
or a rate such as CA registrations a minute): the error that names the limit, and the count.

A refusal is counted twice. In Prometheus (`control_plane_quota_refusals_total`, served with the
web process's other figures on `WEB_METRICS_PORT`), labelled by `limit` alone, one of `LIMITS`:
a bounded set whatever callers pass (anything else counts as `other`), never a tenant's name. And
in the tenant's usage minute as the broker counts its refusals (`Usage.dropped`, cause
`quota_<limit>`), so the quota page and `GET /api/v1/quota`'s `throttling` show it beside the
broker's (`tenants.usage.throttling_words` has its words). The usage write happens outside the
refused write's transaction (which rolls back), in one statement that adds to the minute.
"""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone
from prometheus_client import Counter

from tenants.models import Tenant, Usage

log = logging.getLogger(__name__)

# The limits the control plane refuses by: their names as `Usage.dropped` counts them
# (`quota_<limit>`) and the Prometheus label. Bounded: nothing else is ever a label.
LIMITS = frozenset({"ca_certificates", "ca_registration_rate", "alarms"})

REFUSED = Counter(
    "control_plane_quota_refusals",
    "Writes the control plane refused by a plan limit or a rate (by limit)",
    ["limit"],
)


class QuotaExceeded(ValidationError):
    """A write over one of the plan's limits: a ValidationError (the portal's forms show its
    words as any other) that also names the quota key, which the API answers with (403,
    `{"error": {"code": "quota_exceeded", "quota", "limit", "message", "fields"}}`)."""

    def __init__(self, field: str, message: str, *, quota: str, limit: int) -> None:
        super().__init__({field: [message]})
        self.quota, self.limit = quota, limit


_ADD = f"""
INSERT INTO {Usage._meta.db_table} (tenant_id, minute, connection_seconds, messages_in,
                                    messages_out, bytes_in, bytes_out, dropped, retained_count,
                                    stored_bytes)
VALUES (%s, %s, 0, 0, 0, 0, 0, jsonb_build_object(%s::text, 1), 0, 0)
ON CONFLICT (tenant_id, minute) DO UPDATE SET
  dropped = {Usage._meta.db_table}.dropped || jsonb_build_object(
    %s::text, COALESCE(({Usage._meta.db_table}.dropped ->> %s)::bigint, 0) + 1)
"""


def count_refusal(tenant: Tenant, limit: str) -> None:
    """Count one refusal by `limit` (one of `LIMITS`) for the tenant. Never raises: a refusal
    is answered whether or not it could be counted."""
    label = limit if limit in LIMITS else "other"
    REFUSED.labels(label).inc()
    if label == "other":
        return
    cause = f"quota_{label}"
    minute = timezone.now().replace(second=0, microsecond=0)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(_ADD, [tenant.id, minute, cause, cause, cause])
    except Exception:  # the count is a courtesy; the refusal stands
        log.warning("could not count a %s refusal for %s", label, tenant.slug, exc_info=True)

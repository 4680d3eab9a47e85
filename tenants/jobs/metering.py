"""Job executions metered, as AWS bills jobs: one remote action per job execution queued on a
device, a retry being a new execution and so another one.

Executions are queued in several places (a job created or a rollout released through the
control plane, a timed-out execution retried by Celery beat, a failed one retried by a broker's
jobs service), each in a transaction of its own. Each of them adds a `JobMeter` row in that same
transaction (`executions_queued` here; `data_plane.jobs.store` on a broker), so an execution is
counted exactly when it exists. Every minute `job_usage_log` (Celery beat's jobs upkeep) writes
the rows not yet written to the usage log, the bill's only source, as rows of writer `jobs`:

1. it claims the unwritten rows in one transaction, giving them a batch number (the smallest
   id among them): what a batch holds never changes after;
2. it writes each hour of a batch to the usage log at a key fixed by the batch and the hour
   (`usage/date=…/hour=…/jobs-{batch}.parquet`): written again after a crash, it is the same
   object with the same rows, so no execution counts twice;
3. it adds the batch to the portal's usage minutes (`tenants_usage.job_executions`) and marks
   it written, in one transaction that locks the batch's rows (two runs never add it twice).
"""

from __future__ import annotations

import io
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

from django.db import connection, transaction

from tenants.models import JobMeter

JOBS_WRITER = "jobs"
BATCH_ROWS = 10_000

_CHART_UPSERT = """
INSERT INTO tenants_usage (tenant_id, minute, connection_seconds, messages_in, messages_out,
                           bytes_in, bytes_out, dropped, retained_count, stored_bytes,
                           job_executions)
SELECT t.id, %s, 0, 0, 0, 0, 0, '{}'::jsonb, 0, 0, %s FROM tenants_tenant t WHERE t.slug = %s
ON CONFLICT (tenant_id, minute) DO UPDATE SET
  job_executions = tenants_usage.job_executions + EXCLUDED.job_executions
"""


def executions_queued(tenant_id: int, count: int) -> None:
    """Count `count` executions queued for the tenant, in the caller's transaction."""
    if count > 0:
        JobMeter.objects.create(tenant_id=tenant_id, executions=count)


def _claim() -> None:
    with transaction.atomic():
        ids = list(
            JobMeter.objects.select_for_update(skip_locked=True)
            .filter(batch__isnull=True, logged_at__isnull=True)
            .order_by("id")
            .values_list("id", flat=True)[:BATCH_ROWS]
        )
        if ids:
            JobMeter.objects.filter(id__in=ids).update(batch=ids[0])


def _minutes(batch: int) -> dict[tuple[str, datetime], int]:
    """The batch's executions per tenant (slug) and minute."""
    sums: dict[tuple[str, datetime], int] = defaultdict(int)
    rows = JobMeter.objects.filter(batch=batch).values_list(
        "tenant__slug", "created_at", "executions"
    )
    for slug, at, count in rows:
        sums[(slug, at.astimezone(UTC).replace(second=0, microsecond=0))] += count
    return sums


def _write_segments(batch: int, sums: dict[tuple[str, datetime], int], store: Any) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from common.archive.schema import USAGE_SCHEMA, usage_segment_key

    hours: dict[datetime, list[dict]] = defaultdict(list)
    for (tenant, minute), count in sorted(sums.items()):
        row: dict[str, Any] = {name: 0 for name in USAGE_SCHEMA.names}
        row.update(tenant=tenant, minute=minute, writer=JOBS_WRITER, job_executions=count)
        hours[minute.replace(minute=0)].append(row)
    keys = []
    for hour, rows in sorted(hours.items()):
        sink = io.BytesIO()
        table = pa.Table.from_pylist(rows, schema=USAGE_SCHEMA)
        pq.write_table(table, sink, compression="zstd")
        key = usage_segment_key(int(hour.timestamp() * 1000), JOBS_WRITER, batch)
        store.put(key, sink.getvalue())
        keys.append(key)
    return keys


def job_usage_log(*, store: Any = None) -> dict[str, int]:
    """Write the job executions metered and not yet written to the usage log (and the portal's
    usage minutes); returns how many batches and executions."""
    from common.stores.object_store import open_object_store

    _claim()
    batches = (
        JobMeter.objects.filter(logged_at__isnull=True, batch__isnull=False)
        .order_by("batch")
        .values_list("batch", flat=True)
        .distinct()
    )
    batches = list(batches)
    if batches:
        store = store or open_object_store()
    written = executions = 0
    for batch in batches:
        sums = _minutes(batch)
        _write_segments(batch, sums, store)
        with transaction.atomic():
            rows = JobMeter.objects.select_for_update().filter(batch=batch, logged_at=None)
            if not list(rows.values_list("id", flat=True)):
                continue  # another run wrote it meanwhile
            with connection.cursor() as cursor:
                cursor.executemany(
                    _CHART_UPSERT,
                    [(minute, count, tenant) for (tenant, minute), count in sums.items()],
                )
            rows.update(logged_at=datetime.now(UTC))
        written += 1
        executions += sum(sums.values())
    return {"batches": written, "executions": executions}

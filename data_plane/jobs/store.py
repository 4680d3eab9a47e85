"""Where job executions live: Postgres (`tenants_jobexecution`, owned by the control plane's
`tenants` app). A request is one transaction: the thing's pending executions (and the one it
names) are read, locked when the request writes (in id order, as the control plane locks them
when it cancels a job or times executions out), AWS's
transition applied (`common.jobs.executions`), the row written, and the replies and the
notifications the change calls for returned for the service to publish. A job its last
execution ended is completed without waiting for the job's row (`COMPLETE_SQL`): a cancel
holds that row while it waits for the executions this transaction holds."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from common.contracts import tables
from common.jobs import executions as ex
from common.jobs.topics import DESCRIBE, GET_PENDING, NEXT, START_NEXT, UPDATE, JobTopic


@dataclass(slots=True)
class JobRequest:
    tenant: str
    tenant_id: int
    topic: JobTopic
    request: ex.Request
    requester: Any = None  # whom the in-flight count is held for (the service's key)
    # What came of it, set by the store:
    accepted: dict | None = None
    error: ex.JobError | None = None
    notifications: list[tuple[str, dict]] = field(default_factory=list)


_EPOCH = "extract(epoch from {})::bigint"
_READ = f"""
SELECT e.id, j.id, j.job_id, e.status, e.status_details, {_EPOCH.format("e.queued_at")},
       {_EPOCH.format("e.last_updated_at")}, e.version_number, e.execution_number,
       {_EPOCH.format("e.started_at")}, j.document, {_EPOCH.format("e.timeout_at")},
       j.timeout_minutes, j.retry_criteria, e.failed_retries, e.timed_out_retries
  FROM {tables.DEVICE} d
  JOIN {tables.JOB_EXECUTION} e ON e.device_id = d.id
  JOIN {tables.JOB} j ON j.id = e.job_id
 WHERE d.tenant_id = %s AND d.name = %s
   AND (e.status IN ('QUEUED', 'IN_PROGRESS') OR j.job_id = %s)
 ORDER BY e.id
"""
_LOCK = _READ + " FOR UPDATE OF e"
_DEVICE = f"SELECT 1 FROM {tables.DEVICE} WHERE tenant_id = %s AND name = %s"
_WRITE = f"""
UPDATE {tables.JOB_EXECUTION}
   SET status = %s, status_details = %s::jsonb, version_number = %s,
       started_at = to_timestamp(%s), last_updated_at = to_timestamp(%s),
       timeout_at = to_timestamp(%s), execution_number = %s, queued_at = to_timestamp(%s),
       failed_retries = %s, timed_out_retries = %s
 WHERE id = %s
"""
# A retry is a new execution: metered as the ones the control plane queues (AWS bills each).
_METER = f"INSERT INTO {tables.JOB_METER} (tenant_id, executions) VALUES (%s, 1)"


@dataclass(slots=True)
class Row:
    row_id: int
    job_row: int
    execution: ex.Execution


def _row(r: tuple, thing: str) -> Row:
    execution = ex.Execution(
        job_id=r[2],
        thing=thing,
        status=r[3],
        status_details=r[4] or {},
        queued_at=r[5],
        last_updated_at=r[6],
        version_number=r[7],
        execution_number=r[8],
        started_at=r[9],
        document=r[10],
        timeout_at=r[11],
        job_timeout_minutes=r[12],
        retry_criteria=r[13] or [],
        failed_retries=r[14],
        timed_out_retries=r[15],
    )
    return Row(r[0], r[1], execution)


class PostgresJobs:
    def __init__(self, pool: AsyncConnectionPool) -> None:
        self.pool = pool

    async def perform(self, op: JobRequest, now: int) -> None:
        """Carry out `op`, recording what came of it; raise only when the store failed."""
        topic = op.topic
        writes = topic.operation in (START_NEXT, UPDATE)
        async with self.pool.connection() as conn, conn.transaction():
            cursor = conn.cursor(row_factory=tuple_row)
            named = topic.job_id if topic.job_id and topic.job_id != NEXT else ""
            await cursor.execute(_LOCK if writes else _READ, (op.tenant_id, topic.thing, named))
            rows = [_row(r, topic.thing) for r in await cursor.fetchall()]
            if not rows:
                await cursor.execute(_DEVICE, (op.tenant_id, topic.thing))
                if await cursor.fetchone() is None:
                    op.error = ex.JobError(ex.RESOURCE_NOT_FOUND, "Thing not found")
                    return
            try:
                changed = self._apply(op, rows, now)
            except ex.JobError as error:
                op.error = error
                return
            if changed is None:
                return
            row, after = changed
            await cursor.execute(
                _WRITE,
                (
                    after.status,
                    json.dumps(after.status_details),
                    after.version_number,
                    after.started_at,
                    after.last_updated_at,
                    after.timeout_at,
                    after.execution_number,
                    after.queued_at,
                    after.failed_retries,
                    after.timed_out_retries,
                    row.row_id,
                ),
            )
            if after.execution_number != row.execution.execution_number:
                await cursor.execute(_METER, (op.tenant_id,))
            if after.status in ex.TERMINAL:
                await cursor.execute(ex.COMPLETION_LOCK_SQL, (row.job_row,))
                await cursor.execute(ex.COMPLETE_SQL, (row.job_row, row.job_row))

    @staticmethod
    def _apply(op: JobRequest, rows: list[Row], now: int) -> tuple[Row, ex.Execution] | None:
        """AWS's operation on the rows read: the reply in `op`, and the row changed (with its
        execution as it is now) when it wrote."""
        topic, request = op.topic, op.request
        token = request.client_token
        before = ex.pending_order([r.execution for r in rows])
        if topic.operation == GET_PENDING:
            op.accepted = ex.pending_document(before, now, token)
            return None
        if topic.operation == DESCRIBE:
            if topic.job_id == NEXT:
                found = before[0] if before else None
            else:
                found = next(
                    (r.execution for r in rows if r.execution.job_id == topic.job_id), None
                )
                if found is None or (
                    request.execution_number is not None
                    and request.execution_number != found.execution_number
                ):
                    raise ex.JobError(ex.RESOURCE_NOT_FOUND, "Job execution not found")
            include = request.include_document is not False
            op.accepted = ex.execution_document(found, now, token, include_document=include)
            return None
        if topic.operation == START_NEXT:
            if not before:
                op.accepted = ex.execution_document(None, now, token)
                return None
            row = next(r for r in rows if r.execution is before[0])
            after = ex.start(row.execution, request, now)
            op.accepted = ex.execution_document(after, now, token)
        else:  # UPDATE
            row = next((r for r in rows if r.execution.job_id == topic.job_id), None)
            if row is None:
                raise ex.JobError(ex.RESOURCE_NOT_FOUND, "Job execution not found")
            after = ex.update(row.execution, request, now)
            op.accepted = ex.update_document(after, request, now)
            if ex.retry_due(after):  # the device's answer stands; the job tries again
                after = ex.retried(after, now)
        if after is row.execution:
            return None
        executions = [after if r is row else r.execution for r in rows]
        op.notifications = ex.notifications(topic.thing, before, ex.pending_order(executions), now)
        return row, after

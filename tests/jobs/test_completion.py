"""A job whose last executions end at the same moment still completes: each device's update is its
own transaction, and two of them committing together must not each see the other's execution
still IN_PROGRESS and leave the job IN_PROGRESS for ever (found by `bench.jobs`: a job to 1,000
devices had every execution SUCCEEDED and stayed IN_PROGRESS)."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from django.db import connection
from psycopg_pool import AsyncConnectionPool

from common.jobs import executions as ex
from common.jobs.topics import UPDATE, JobTopic
from data_plane.jobs.store import JobRequest, PostgresJobs
from tenants.devices import services as device_services
from tenants.jobs import services as job_services
from tenants.models import Job, JobExecution
from tenants.tenant import services as tenant_services

pytestmark = pytest.mark.django_db(transaction=True)

DEVICES = 4


def dsn() -> str:
    p = connection.get_connection_params()
    return f"host={p['host']} port={p['port']} user={p['user']} dbname={p['dbname']}"


def test_last_executions_ending_together_complete_the_job():
    tenant = tenant_services.tenant_create("jobs-complete")
    names = [f"d{n}" for n in range(DEVICES)]
    for name in names:
        device_services.device_create(tenant=tenant, name=name)
    job_ids = [f"fw-{n}" for n in range(5)]  # a race: tried on several jobs
    for job_id in job_ids:
        job_services.job_create(
            tenant=tenant, job_id=job_id, document={}, targets={"devices": names}
        )
    JobExecution.objects.filter(tenant=tenant).update(status=ex.IN_PROGRESS)
    connection.close()  # the broker's side and ours share the database

    async def finish_together() -> None:
        async with AsyncConnectionPool(
            dsn(), min_size=DEVICES, max_size=DEVICES, open=False
        ) as pool:
            await pool.open(wait=True)
            store = PostgresJobs(pool)
            for job_id in job_ids:
                ops = [
                    JobRequest(
                        tenant.slug,
                        tenant.id,
                        JobTopic(name, UPDATE, job_id),
                        ex.Request(status=ex.SUCCEEDED),
                    )
                    for name in names
                ]
                await asyncio.gather(*(store.perform(op, 1_800_000_000) for op in ops))
                assert all(op.error is None for op in ops)

    asyncio.run(finish_together())
    statuses = dict(Job.objects.filter(tenant=tenant).values_list("job_id", "status"))
    assert statuses == dict.fromkeys(job_ids, Job.Status.COMPLETED)


def test_a_devices_last_update_never_waits_for_a_job_row_a_cancel_holds():
    """A cancel locks the job's row, then its executions; a device's last update holds its
    execution and then completed the job through that row: each waited for the other (Postgres
    broke the deadlock by failing one: the device's update, or the cancel with a 500). The
    update now finishes while the row is held; the job is left to its holder, or completed by
    the minute's upkeep when the holder ends it no other way."""
    tenant = tenant_services.tenant_create("jobs-cancel-race")
    device_services.device_create(tenant=tenant, name="d0")
    job = job_services.job_create(
        tenant=tenant, job_id="fw", document={}, targets={"devices": ["d0"]}
    )
    JobExecution.objects.filter(tenant=tenant).update(status=ex.IN_PROGRESS)
    connection.close()

    async def finish() -> ex.JobError | None:
        async with AsyncConnectionPool(dsn(), min_size=1, max_size=1, open=False) as pool:
            await pool.open(wait=True)
            op = JobRequest(
                tenant.slug,
                tenant.id,
                JobTopic("d0", UPDATE, "fw"),
                ex.Request(status=ex.SUCCEEDED),
            )
            await asyncio.wait_for(PostgresJobs(pool).perform(op, 1_800_000_000), 5)
            return op.error

    with psycopg.connect(dsn()) as holder:  # what a cancel (or an edit) does first
        holder.execute("SELECT id FROM tenants_job WHERE id = %s FOR UPDATE", [job.id])
        assert asyncio.run(finish()) is None
        holder.rollback()  # it found nothing to cancel
    assert JobExecution.objects.get(job=job).status == ex.SUCCEEDED
    assert Job.objects.get(id=job.id).status == Job.Status.IN_PROGRESS
    assert job_services.jobs_complete_ended() == 1
    assert Job.objects.get(id=job.id).status == Job.Status.COMPLETED
    assert job_services.jobs_complete_ended() == 0

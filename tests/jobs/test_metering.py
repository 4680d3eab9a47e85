"""Job executions metered as AWS bills jobs (one remote action per execution, a retry being a
new one): counted in the transaction that queues them, written once to the usage log (writer
`jobs`) by the jobs upkeep, and shown in the usage API."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta

import pyarrow.parquet as pq
import pytest
from django.utils import timezone

from common.stores.object_store import LocalObjectStore
from tenants.jobs import metering as job_metering
from tenants.jobs import services as job_services
from tenants.models import JobExecution
from tests.shadows.conftest import api_client, make_fleet

pytestmark = pytest.mark.django_db(transaction=True)


def logged(store: LocalObjectStore, tenant: str) -> int:
    total = 0
    for key in store.list("usage/"):
        if key.rsplit("/", 1)[-1].startswith("jobs-"):
            table = pq.read_table(io.BytesIO(store.get(key))).to_pylist()
            total += sum(r["job_executions"] for r in table if r["tenant"] == tenant)
    return total


def test_executions_and_retries_reach_the_usage_log_once(tmp_path):
    fleet = make_fleet(tmp_path, "me")
    other = make_fleet(tmp_path, "mo")
    for name in ("a", "b"):
        fleet.device(name)
    api = api_client(fleet.tenant)
    body = {
        "job_id": "fw",
        "document": {},
        "targets": {"devices": ["a", "b"]},
        "timeout_minutes": 5,
        "retry": {"criteria": [{"failure_type": "TIMED_OUT", "number_of_retries": 1}]},
    }
    assert api.post("/api/v1/jobs", body, format="json").status_code == 201
    past = timezone.now() - timedelta(minutes=1)
    JobExecution.objects.filter(job__tenant=fleet.tenant, device__name="a").update(
        status="IN_PROGRESS", started_at=past, timeout_at=past
    )
    assert job_services.jobs_time_out() == 1  # retried: a second execution of the job on `a`
    store = LocalObjectStore(tmp_path / "objects")
    # A run that stopped after writing the log, before marking the rows: the next writes the
    # same object again (same key, same rows), so nothing counts twice.
    job_metering._claim()
    (batch,) = job_metering.JobMeter.objects.values_list("batch", flat=True).distinct()
    job_metering._write_segments(batch, job_metering._minutes(batch), store)
    assert job_metering.job_usage_log(store=store) == {"batches": 1, "executions": 3}
    assert job_metering.job_usage_log(store=store) == {"batches": 0, "executions": 0}
    assert logged(store, fleet.slug) == 3 and logged(store, other.slug) == 0

    now = datetime.now(UTC)
    query = {
        "from": (now - timedelta(hours=2)).isoformat(),
        "to": (now + timedelta(hours=1)).isoformat(),
        "granularity": "hour",
    }
    series = api.get("/api/v1/usage", query).json()["series"]
    assert sum(point["job_executions"] for point in series) == 3
    theirs = api_client(other.tenant).get("/api/v1/usage", query).json()["series"]
    assert sum(point["job_executions"] for point in theirs) == 0

"""`bench.jobs` runs end to end at a small size (so the script cannot rot): 20 devices told of a
job to their group, each starting it and reporting SUCCEEDED, the job COMPLETED."""

import asyncio

import pytest

from bench import jobs
from tests.tenancy.test_broker_tenancy import running_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_job_to_twenty_devices_is_notified_and_collected():
    slug, names = jobs.seed(20)
    with running_pg_broker() as port:
        result = asyncio.run(jobs.measure(port, slug, names, concurrency=10, limit=30))
    assert result.rejected == []
    assert (result.notified, result.succeeded) == (20, 20)
    assert result.all_notified is not None and result.all_succeeded_rest is not None
    assert result.final_status == "COMPLETED"
    assert result.detail == {"SUCCEEDED": 20}
    assert "all 20 by" in jobs.report(result)

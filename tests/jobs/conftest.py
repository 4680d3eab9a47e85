"""Jobs end to end: a real broker process on the test database with a TLS listener, and tenants
whose devices prove who they are with certificates of a CA the tenant registered (the shadow
tests' set-up: `tests/shadows/conftest.py`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.shadows.conftest import Fleet, TlsBroker, make_fleet, start_tls_broker


@pytest.fixture(scope="package")
def jobs_broker(
    tmp_path_factory, django_db_setup, django_db_blocker, live_server
) -> Iterator[TlsBroker]:
    """One broker for the jobs tests (each test makes a tenant of its own); only while they run,
    so no other package's broker takes the control plane's announcements meanwhile. Its job
    documents' artifact URLs name the test's web server (`live_server`)."""
    with django_db_blocker.unblock():
        broker = start_tls_broker(
            tmp_path_factory.mktemp("jobs-broker"), env={"PORTAL_URL": live_server.url}
        )
    yield broker
    broker.stop()


@pytest.fixture
def fleet(tmp_path) -> Fleet:
    return make_fleet(tmp_path, "jb")

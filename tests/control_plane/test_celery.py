"""Celery with a real worker and beat (embedded Redis as broker), not eager mode."""

import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from tenants.devices import services as device_services
from tenants.models import Credential
from tenants.tenant import services as tenant_services
from tests.celery_processes import worker_and_beat

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def worker(django_db_setup, django_db_blocker, tmp_path_factory):
    """One worker and one beat for this module's tests (each start and warm shutdown takes
    seconds); a module whose tests set the environment first starts its own."""
    with django_db_blocker.unblock():
        database = connection.settings_dict["NAME"]
    with worker_and_beat(tmp_path_factory.mktemp("celery"), database) as env:
        yield env


def test_beat_schedules_credential_expiry_on_a_real_worker(worker):
    tenant = tenant_services.tenant_create("acme")
    device, _ = device_services.device_create(tenant=tenant, name="sensor-1")
    Credential.objects.filter(device=device).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if Credential.objects.filter(device=device, revoked_at__isnull=False).exists():
            break
        time.sleep(0.3)
    else:
        pytest.fail("the worker never expired the credential")


def test_task_runs_on_the_worker_and_returns_its_result(worker):
    from control_plane.celery import app

    tenant = tenant_services.tenant_create("acme")
    for name in ("a1", "a2"):
        device, _ = device_services.device_create(tenant=tenant, name=name)
    Credential.objects.update(expires_at=timezone.now() + timedelta(milliseconds=100))
    time.sleep(0.2)
    # Beat may sweep first; between the two, both credentials get revoked exactly once.
    result = app.send_task("tenants.tasks.expire_credentials").get(timeout=60)
    assert isinstance(result, int)
    deadline = time.monotonic() + 30
    while Credential.objects.filter(revoked_at=None).exists() and time.monotonic() < deadline:
        time.sleep(0.3)
    assert not Credential.objects.filter(revoked_at=None).exists()

"""Authentication decisions against the control plane's tables in real Postgres."""

import asyncio
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone
from psycopg_pool import AsyncConnectionPool

from data_plane.tenancy.directory import TenantDirectory
from data_plane.tenancy.store import TenantStore
from tenants.devices import services as device_services
from tenants.models import Credential
from tenants.tenant import services as tenant_services

pytestmark = pytest.mark.django_db(transaction=True)


def dsn() -> str:
    p = connection.get_connection_params()
    return f"host={p['host']} port={p['port']} user={p['user']} dbname={p['dbname']}"


async def orm(fn, *args, **kwargs):
    """Run ORM code off the event loop and close that thread's connection afterwards."""

    def call():
        try:
            return fn(*args, **kwargs)
        finally:
            connection.close()

    return await asyncio.to_thread(call)


def run(check):
    async def main():
        async with AsyncConnectionPool(dsn(), min_size=1, max_size=2, open=False) as pool:
            await pool.open(wait=True)
            return await check(TenantDirectory(TenantStore(pool)))

    return asyncio.run(main())


@pytest.fixture
def acme():
    tenant = tenant_services.tenant_create("acme")
    _, secret = device_services.device_create(tenant=tenant, name="sensor-1")
    _, gw_secret = device_services.device_create(
        tenant=tenant, name="gw", client_id_policy="pattern", client_id_pattern="gw-*"
    )
    return tenant, secret, gw_secret


def test_codes_for_each_failure(acme):
    tenant, secret, gw_secret = acme
    other = tenant_services.tenant_create("other")
    device_services.device_create(tenant=other, name="sensor-1")

    async def check(directory):
        auth = directory.authenticate
        results = {
            "ok": await auth("acme/sensor-1", secret.encode(), "", "a1"),
            "wrong": await auth("acme/sensor-1", b"nope", "sensor-1", "a2"),
            "cross-tenant secret": await auth("other/sensor-1", secret.encode(), "", "a3"),
            "no password": await auth("acme/sensor-1", None, "", "a4"),
            "unknown device": await auth("acme/ghost", secret.encode(), "", "a5"),
            "unknown tenant": await auth("ghost/sensor-1", secret.encode(), "", "a6"),
            "no slash": await auth("sensor-1", secret.encode(), "", "a7"),
            "extra slash": await auth("acme/sensor-1/x", secret.encode(), "", "a8"),
            "empty": await auth("", secret.encode(), "", "a9"),
            "huge": await auth("a" * 65535, secret.encode(), "", "a10"),
            "exact id mismatch": await auth("acme/sensor-1", secret.encode(), "other-id", "a11"),
            "pattern ok": await auth("acme/gw", gw_secret.encode(), "gw-17", "a12"),
            "pattern bad": await auth("acme/gw", gw_secret.encode(), "sensor-1", "a13"),
        }
        return {name: decision.reason_code for name, decision in results.items()}, results

    codes, results = run(check)
    assert codes == {
        "ok": 0,
        "wrong": 0x86,
        "cross-tenant secret": 0x86,
        "no password": 0x86,
        "unknown device": 0x86,
        "unknown tenant": 0x86,
        "no slash": 0x86,
        "extra slash": 0x86,
        "empty": 0x86,
        "huge": 0x86,
        "exact id mismatch": 0x85,
        "pattern ok": 0,
        "pattern bad": 0x85,
    }
    assert results["ok"].client_id == "sensor-1"  # exact policy assigns the device name
    assert results["ok"].tenant == "acme" and results["ok"].policy.quota["max_connections"] > 0


def test_disabled_revoked_expired_and_suspended(acme):
    tenant, secret, _ = acme

    async def check(directory):
        auth = directory.authenticate
        codes = []
        device = await orm(lambda: tenant.devices.get(name="sensor-1"))
        await orm(device_services.device_update, device, enabled=False)
        directory.forget_device("acme", "sensor-1")
        codes.append((await auth("acme/sensor-1", secret.encode(), "", "x")).reason_code)
        await orm(device_services.device_update, device, enabled=True)
        await orm(
            lambda: Credential.objects.filter(device=device).update(
                expires_at=timezone.now() - timedelta(seconds=1)
            )
        )
        directory.forget_device("acme", "sensor-1")
        codes.append((await auth("acme/sensor-1", secret.encode(), "", "x")).reason_code)
        _, new_secret = await orm(device_services.credential_rotate, device)
        directory.forget_device("acme", "sensor-1")
        codes.append((await auth("acme/sensor-1", new_secret.encode(), "", "x")).reason_code)
        await orm(tenant_services.tenant_set_status, tenant, "suspended")
        directory.forget_tenant("acme")
        codes.append((await auth("acme/sensor-1", new_secret.encode(), "", "x")).reason_code)
        return codes

    assert run(check) == [0x87, 0x86, 0x00, 0x8A]


def test_cache_serves_repeat_connects_without_the_database(acme):
    _, secret, _ = acme

    async def check(directory):
        for _ in range(50):
            decision = await directory.authenticate("acme/sensor-1", secret.encode(), "", "x")
            assert decision.ok
        return dict(directory.stats)

    stats = run(check)
    assert stats["device_cache_misses"] == 1 and stats["device_cache_hits"] == 49


def test_failed_attempts_are_throttled_per_source_and_the_right_secret_still_gets_in(acme):
    """20 wrong secrets for one user name from one address: that user name from that address is
    refused unjudged (0x9f) but for one attempt a second, so the right secret gets in at its
    next try; the same address with another user name, or another address, is not slowed."""
    tenant, secret, _ = acme
    _, neighbour = device_services.device_create(tenant=tenant, name="sensor-9")

    async def check(directory):
        for _ in range(20):
            await directory.authenticate("acme/sensor-1", b"wrong", "", "10.0.0.1")
        guess = await directory.authenticate("acme/sensor-1", b"wrong", "", "10.0.0.1")
        unjudged = await directory.authenticate("acme/sensor-1", secret.encode(), "", "10.0.0.1")
        beside = await directory.authenticate("acme/sensor-9", neighbour.encode(), "", "10.0.0.1")
        elsewhere = await directory.authenticate("acme/sensor-1", secret.encode(), "", "10.0.0.2")
        await asyncio.sleep(1.05)
        later = await directory.authenticate("acme/sensor-1", secret.encode(), "", "10.0.0.1")
        codes = (guess, unjudged, beside, elsewhere, later)
        return tuple(decision.reason_code for decision in codes)

    # the trickle judged the guess (0x86); the right secret just after waits its second
    assert run(check) == (0x86, 0x9F, 0x00, 0x00, 0x00)

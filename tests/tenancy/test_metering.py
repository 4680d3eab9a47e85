"""Usage metering: in-memory minutes, flushed in one batch to tenants_usage in real Postgres."""

import asyncio

import psycopg
import pytest
from django.db import connection

from data_plane.tenancy.metering import UsageMeter
from tenants.models import Usage
from tenants.tenant import services as tenant_services


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def dsn() -> str:
    p = connection.get_connection_params()
    return f"host={p['host']} port={p['port']} user={p['user']} dbname={p['dbname']}"


def test_connection_seconds_split_across_minutes():
    clock = Clock(600.0)
    meter = UsageMeter(clock)
    meter.connected("acme")
    meter.connected("acme")
    clock.now = 690.0  # 60 s in minute 600, 30 s in minute 660, two connections
    meter.disconnected("acme")
    rows = {(t, m): u for t, m, u in meter.take(final=True)}
    assert rows[("acme", 600)].connection_seconds == 120
    assert rows[("acme", 660)].connection_seconds == 60


@pytest.mark.django_db(transaction=True)
def test_flush_upserts_finished_minutes_per_tenant():
    tenant_services.tenant_create("acme")
    tenant_services.tenant_create("other")
    clock = Clock(1_700_000_000.0)
    meter = UsageMeter(clock)
    for _ in range(3):
        meter.message_in("acme", 100)
    meter.message_out("acme", 100)
    meter.dropped("acme", "queue_full", 2)
    meter.message_in("other", 7)

    async def flushes():
        async with await psycopg.AsyncConnection.connect(dsn()) as conn:
            assert await meter.flush(conn) == 0  # the minute is not over yet
            clock.now += 60
            meter.dropped("acme", "queue_full")
            assert await meter.flush(conn) == 2
            clock.now += 60
            assert await meter.flush(conn) == 1  # the second minute's drop

    asyncio.run(flushes())
    rows = list(Usage.objects.select_related("tenant").order_by("minute"))
    acme = [r for r in rows if r.tenant.slug == "acme"]
    assert (acme[0].messages_in, acme[0].bytes_in, acme[0].messages_out) == (3, 300, 1)
    assert acme[0].dropped == {"queue_full": 2}
    assert acme[1].dropped == {"queue_full": 1}
    other = [r for r in rows if r.tenant.slug == "other"]
    assert other[0].messages_in == 1 and other[0].bytes_in == 7


@pytest.mark.django_db(transaction=True)
def test_flush_adds_to_an_existing_minute():
    tenant_services.tenant_create("acme")
    clock = Clock(1_700_000_000.0)

    async def two_workers():
        async with await psycopg.AsyncConnection.connect(dsn()) as conn:
            for _ in range(2):
                meter = UsageMeter(clock)  # two broker workers reporting the same minute
                meter.message_in("acme", 10)
                meter.dropped("acme", "rate")
                await meter.flush(conn, final=True)

    asyncio.run(two_workers())
    (row,) = list(Usage.objects.all())
    assert row.messages_in == 2 and row.dropped == {"rate": 2}


def test_a_closed_connection_is_not_kept_alive_by_the_meter():
    """Connection-minutes are charged from a heap of due times; a closed connection's entry
    stays there until its minute is up. It must not keep the connection (its buffers, its
    session's parts) alive meanwhile: under churn that pinned a minute's worth of dead
    connections (the soak found ~800 of them at 11 closes/s)."""
    import gc
    import weakref

    class Connection:  # what the broker hands the meter as the key
        pass

    clock = Clock(600.0)
    meter = UsageMeter(clock)
    kept, gone = Connection(), Connection()
    meter.connection_opened(kept, "acme")
    meter.connection_opened(gone, "acme")
    watch = weakref.ref(gone)
    clock.now = 610.0
    meter.connection_closed(gone)
    del gone
    gc.collect()
    assert watch() is None, "the meter still holds a closed connection"
    # Open connections are still charged a minute per minute begun, closed ones no more.
    clock.now = 725.0
    rows = {(t, m): u for t, m, u in meter.take(final=True)}
    assert rows[("acme", 600)].connection_minutes == 2  # both, in the minute they opened
    assert rows[("acme", 660)].connection_minutes == 1  # only the one still open
    assert rows[("acme", 720)].connection_minutes == 1
    meter.connection_closed(kept)
    assert not meter._open and not meter._keys


# -- throttling: slowdowns metered apart from drops (issue 28) ------------------------------


@pytest.mark.django_db(transaction=True)
def test_slowdowns_are_metered_apart_from_drops_and_merge_across_workers():
    """A publisher paused over the publish rate is slowed, not dropped: the minute's row says
    so in `throttled`, by quota key, and two workers reporting the same minute add up (as
    `dropped` does); refusals stay in `dropped` as `quota_<key>`."""
    tenant_services.tenant_create("acme")
    clock = Clock(1_700_000_000.0)

    async def two_workers():
        async with await psycopg.AsyncConnection.connect(dsn()) as conn:
            first = UsageMeter(clock)
            for _ in range(3):
                first.throttled("acme", "publish_rate")
            first.throttled("acme", "outbound_rate")
            first.dropped("acme", "quota_publish_rate")
            await first.flush(conn, final=True)
            second = UsageMeter(clock)
            second.throttled("acme", "publish_rate", 2)
            second.throttled("acme", "device_publish_rate")
            await second.flush(conn, final=True)

    asyncio.run(two_workers())
    (row,) = list(Usage.objects.all())
    assert row.throttled == {"publish_rate": 5, "outbound_rate": 1, "device_publish_rate": 1}
    assert row.dropped == {"quota_publish_rate": 1}


def test_a_failed_flush_puts_slowdowns_back():
    clock = Clock(600.0)
    meter = UsageMeter(clock)
    meter.throttled("acme", "publish_rate", 4)
    rows = meter.take(final=True)
    meter.throttled("acme", "publish_rate")  # counted meanwhile, same minute
    meter.restore(rows)
    ((_, _, usage),) = meter.take(final=True)
    assert dict(usage.throttled) == {"publish_rate": 5}
    assert dict(usage.dropped) == {}


def test_the_observers_meter_the_brokers_throttled_hook_apart_from_refusals():
    """The broker's `quota.throttled` (a slowdown) and `quota.exceeded` (a refusal) reach the
    meter as a slowdown and a `quota_<key>` drop: the same broker, the observers' own hooks."""
    from data_plane.broker.broker import Broker
    from data_plane.config import BrokerConfig
    from data_plane.tenancy.observers import TenancyObservers
    from data_plane.tenancy.static import StaticAuthenticator

    broker = Broker(BrokerConfig(), StaticAuthenticator({}))
    observers = TenancyObservers(broker, pool=None)
    broker.quota_exceeded("acme", "publish_rate", throttled=True)
    broker.quota_exceeded("acme", "publish_rate", throttled=True)
    broker.quota_exceeded("acme", "outbound_rate", throttled=True)
    broker.quota_exceeded("acme", "publish_rate")
    ((tenant, _, usage),) = observers.meter.take(final=True)
    assert tenant == "acme"
    assert dict(usage.throttled) == {"publish_rate": 2, "outbound_rate": 1}
    assert dict(usage.dropped) == {"quota_publish_rate": 1}

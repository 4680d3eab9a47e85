"""The broker's batches shared by tenants: one tenant's value that Postgres refuses must not fail
another tenant's writes (issue 44, point 3; docs/architecture.md, "Batches shared by tenants").

The value here is a client id longer than the tables hold (MQTT allows 65,535 bytes; the
sessions' and queues' `client_id` is varchar(256), presence's varchar(255)). Before the broker
refused it at CONNECT, a persistent session with such an id failed every group commit of the
session store it joined (other tenants' publishers got PUBACK 0x80) and wedged presence for every
tenant (its changes were kept and retried forever). Behind that check, each batch writes its
operations one at a time when it fails, so only the one refused alone fails: the stores are
fed such a value directly below, beside another tenant's writes in the same batch."""

from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import psycopg
import pytest
from django.db import connection
from psycopg_pool import AsyncConnectionPool

from common.stores import isolation
from data_plane.broker.hooks import Hooks
from data_plane.storage.queue_records import StoreRefused
from data_plane.storage.session_store import QueuedMessage, SessionStore
from data_plane.tenancy.metering import UsageMeter
from data_plane.tenancy.presence import Presence
from tenants.devices import services as device_services
from tenants.models import DeviceConnection, DeviceUsage, MqttQueuedMessage, Usage
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.storage.test_session_store import dsn
from tests.tenancy.test_broker_tenancy import running_pg_broker
from tests.tenancy.test_metering import Clock

pytestmark = pytest.mark.django_db(transaction=True)

LONG_ID = "x" * 300  # MQTT takes it; no table does


@pytest.fixture
def tenants():
    """(attacker, victim): each with a device that may use any client id, and its secret."""
    made = []
    for slug in ("atk", "vic"):
        tenant = tenant_services.tenant_create(slug)
        _, secret = device_services.device_create(tenant=tenant, name="dev", client_id_policy="any")
        made.append((tenant, secret))
    return made


def test_connect_refuses_a_client_id_no_table_holds(tenants):
    """On a real broker: the attacker's long client id is refused at CONNECT (0x85), and the
    victim's QoS 1 publishes to its persistent session, sent meanwhile, all succeed; its
    presence is written."""
    (_, atk_secret), (victim, vic_secret) = tenants
    with running_pg_broker() as port:
        bad = Paho(port, "atk/dev", atk_secret, LONG_ID, clean=False, expiry=3600)
        if bad.reason_code == 0:  # (as it was) its deliveries join the victim's group commits
            bad.subscribe("t/#", 1)
        sub = Paho(port, "vic/dev", vic_secret, "vsub", clean=False, expiry=3600)
        sub.subscribe("t/#", 1)
        pub = Paho(port, "vic/dev", vic_secret, "vpub")
        codes: list[int] = []
        done = threading.Event()

        def published(client, userdata, mid, reason_code, properties):
            codes.append(reason_code.value)
            if len(codes) == 20:
                done.set()

        pub.client.on_publish = published
        for i in range(20):
            if bad.reason_code == 0:
                bad.client.publish("t/a", b"hostile", 1)
            pub.client.publish("t/a", f"m{i}".encode(), 1)
        assert done.wait(10)
        assert codes == [0] * 20
        assert len(sub.expect(20, 5)) == 20
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            connection.close()
            if DeviceConnection.objects.filter(tenant=victim, client_id="vsub").exists():
                break
            time.sleep(0.2)
        assert DeviceConnection.objects.filter(tenant=victim, client_id="vpub").exists()
        for client in (sub, pub):
            client.close()
        assert bad.reason_code == 0x85  # Client Identifier not valid
        assert not bad.client.is_connected()


def test_session_store_group_commit_fails_only_the_write_refused_alone(tenants):
    """One group commit (its window held open) with the attacker's enqueue beside the victim's
    enqueues, marks, acks and QoS 2 ids: the victim's all take effect, the attacker's fails
    with `StoreRefused`."""
    (attacker, _), (victim, _) = tenants
    before = isolation.REFUSED["session_store"]

    async def main():
        async with AsyncConnectionPool(dsn(), min_size=1, max_size=4, open=False) as pool:
            await pool.open(wait=True)
            store = SessionStore(pool, commit_interval=0.3)
            store.start()
            try:
                await store.save_session(victim.id, "v", expiry_interval=3600, subscriptions=[])
                first = [
                    store.enqueue(victim.id, "v", QueuedMessage(i, "t", b"x", 1)) for i in (1, 2)
                ]
                await asyncio.gather(*first)
                futures = [
                    store.enqueue(victim.id, "v", QueuedMessage(3, "t", b"y", 1)),
                    store.enqueue(attacker.id, LONG_ID, QueuedMessage(1, "t", b"z", 1)),
                    store.mark(victim.id, "v", 2, 7, 1),
                    store.ack(victim.id, "v", 1),
                    store.inbound_qos2(victim.id, "v", 9, True),
                    store.enqueue(victim.id, "v", QueuedMessage(4, "t", b"w", 1)),
                ]
                return await asyncio.gather(*futures, return_exceptions=True)
            finally:
                await store.stop()

    results = asyncio.run(main())
    assert isinstance(results[1], StoreRefused), results
    assert results[:1] + results[2:] == [None] * 5, results
    assert isolation.REFUSED["session_store"] == before + 1
    rows = MqttQueuedMessage.objects.filter(tenant=victim).order_by("seq")
    assert [(r.seq, r.packet_id, r.state) for r in rows] == [
        (2, 7, 1),
        (3, None, 0),
        (4, None, 0),
    ]
    assert not MqttQueuedMessage.objects.filter(tenant=attacker).exists()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT inbound_qos2 FROM tenants_mqttsession WHERE tenant_id = %s", [victim.id]
        )
        assert cursor.fetchone()[0] == [9]


def _conn(tenant: str, client_id: str) -> SimpleNamespace:
    session = SimpleNamespace(subscriptions={}, connection=None, expiry_interval=0)
    conn = SimpleNamespace(
        tenant=tenant,
        device="dev",
        client_id=client_id,
        peer="127.0.0.1:5000",
        protocol_version=5,
        transport_name="tcp",
        session=session,
        disconnect_reason="normal",
        clean_start=True,
    )
    session.connection = conn
    return conn


def test_presence_drops_only_the_change_refused_alone(tenants):
    """One presence flush with the attacker's connect (a client id presence's table cannot hold)
    between the victim's connects and a disconnect: the victim's rows are written, the
    attacker's change is dropped rather than kept to fail every later flush."""
    (attacker, _), (victim, _) = tenants

    async def main():
        async with AsyncConnectionPool(dsn(), min_size=1, max_size=2, open=False) as pool:
            await pool.open(wait=True)
            broker = SimpleNamespace(hooks=Hooks(), connections=[])
            presence = Presence(broker, pool)
            conns = [_conn("vic", "v1"), _conn("atk", LONG_ID), _conn("vic", "v2")]
            for conn in conns:
                broker.connections.append(conn)
                broker.hooks.run("client.connected", conn)
            broker.hooks.run("client.disconnected", conns[2])
            await presence.flush()
            left = list(presence._ops)
            broker.hooks.run("client.connected", _conn("vic", "v3"))
            await presence.flush()  # the next flush is not held up by it either
            return left

    assert asyncio.run(main()) == []
    rows = DeviceConnection.objects.filter(tenant=victim).order_by("client_id")
    assert [r.client_id for r in rows] == ["v1", "v3"]
    assert not DeviceConnection.objects.filter(tenant=attacker).exists()
    victim.refresh_from_db()
    device = victim.devices.get(name="dev")
    assert device.last_disconnect_reason == "normal"


def test_usage_flush_drops_only_the_minute_refused_alone(tenants):
    """One usage flush with the attacker's minute holding a device name `tenants_deviceusage`
    cannot hold (device names are at most 64 characters, so only a bug would make one) beside
    the victim's: the victim's minute and device day are written, the attacker's minute is not
    kept to fail every later flush, and the usage log (the bill) still gets both."""
    (attacker, _), (victim, _) = tenants
    clock = Clock(1_700_000_000.0)
    meter = UsageMeter(clock)
    meter.message_in("atk", 10)
    meter.device_units("atk", {"d" * 200: 1})
    meter.message_in("vic", 20)
    meter.device_units("vic", {"dev": 2})
    clock.now += 60
    exported: list = []

    async def flush():
        async with await psycopg.AsyncConnection.connect(dsn()) as conn:
            return await meter.flush(conn, exported=exported.extend)

    assert asyncio.run(flush()) == 2
    assert meter.take(final=True) == []  # nothing kept back for the next flush
    assert sorted(tenant for tenant, _, _ in exported) == ["atk", "vic"]
    assert Usage.objects.get(tenant=victim).messages_in == 1
    assert DeviceUsage.objects.get(tenant=victim).message_units == 2
    assert not Usage.objects.filter(tenant=attacker).exists()


def test_writes_refused_alone_are_counted_on_the_brokers_metrics():
    from data_plane.metrics import BrokerCollector
    from tests.broker.unit.fakes import make_broker

    isolation.REFUSED["presence"] += 1
    families = {f.name: f for f in BrokerCollector(make_broker()).collect()}
    samples = {s.labels["batch"]: s.value for s in families["mqtt_batch_writes_refused"].samples}
    assert samples["presence"] == isolation.REFUSED["presence"] >= 1

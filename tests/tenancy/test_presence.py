"""Presence's writer alone, with a fake pool: while the database is away changes are kept in
order, and past a bound they are dropped for one rewrite of this broker's rows from what is live
(so memory stays bounded and no row says "connected" for a client that left)."""

import asyncio
from contextlib import asynccontextmanager
from types import SimpleNamespace

import pytest

from data_plane.broker.hooks import Hooks
from data_plane.tenancy import presence as presence_module
from data_plane.tenancy.presence import Presence


class FakePool:
    def __init__(self):
        self.up = False
        self.statements: list[tuple[str, tuple]] = []
        self.round_trips = 0  # execute / executemany calls (psycopg pipelines an executemany)

    @asynccontextmanager
    async def connection(self):
        if not self.up:
            raise OSError("database away")
        pool = self

        class Cursor:
            async def execute(self, sql, params=()):
                pool.round_trips += 1
                pool.statements.append((" ".join(sql.split())[:30], params))

            async def executemany(self, sql, rows):
                pool.round_trips += 1
                for params in rows:
                    pool.statements.append((" ".join(sql.split())[:30], params))

        class Conn:
            def cursor(self):
                return Cursor()

            @asynccontextmanager
            async def transaction(self):
                yield

            async def execute(self, sql, params=()):
                pool.statements.append((" ".join(sql.split())[:30], params))

        yield Conn()


def conn(name):
    session = SimpleNamespace(subscriptions={}, connection=None)
    c = SimpleNamespace(
        tenant="acme",
        device=name,
        client_id=name,
        peer="127.0.0.1:5000",
        protocol_version=5,
        transport_name="tcp",
        session=session,
        disconnect_reason="normal",
    )
    session.connection = c
    return c


def test_bounded_while_the_database_is_away_then_rewritten(monkeypatch):
    monkeypatch.setattr(presence_module, "MAX_PENDING", 5)
    pool = FakePool()
    broker = SimpleNamespace(hooks=Hooks(), connections=[])
    presence = Presence(broker, pool)
    clients = [conn(f"d{i}") for i in range(8)]
    for c in clients:
        broker.connections.append(c)
        broker.hooks.run("client.connected", c)
    for c in clients[:6]:  # most leave again while the database is away
        broker.connections.remove(c)
        broker.hooks.run("client.disconnected", c)
    assert len(presence._ops) <= 5
    with pytest.raises(OSError):
        asyncio.run(presence.flush())
    pool.up = True
    asyncio.run(presence.flush())
    kinds = [s for s, _ in pool.statements]
    assert kinds[0].startswith("DELETE FROM tenants_deviceconn")
    written = [params[1] for s, params in pool.statements if s.startswith("INSERT")]
    assert written == [["d6", "d7"]]  # exactly who is connected now


def test_a_storm_is_written_in_one_statement_per_run_of_changes():
    """1,000 connects then 1,000 disconnects, recorded between two writes: three statements
    over arrays (rows up; rows down; last disconnect reasons), the changes in their order."""
    pool = FakePool()
    pool.up = True
    broker = SimpleNamespace(hooks=Hooks(), connections=[])
    presence = Presence(broker, pool)
    clients = [conn(f"d{i}") for i in range(1000)]
    for c in clients:
        broker.hooks.run("client.connected", c)
    for c in clients:
        broker.hooks.run("client.disconnected", c)
    asyncio.run(presence.flush())
    assert pool.round_trips == 3
    kinds = [s.split()[0] for s, _ in pool.statements]
    assert kinds == ["INSERT", "DELETE", "UPDATE"]
    up, down, reasons = (params for _, params in pool.statements)
    names = [f"d{i}" for i in range(1000)]
    assert up[1] == names and len(set(up[2])) == 1000  # client ids in order, a key each
    assert sorted(down[0]) == sorted(up[2])  # the same connections' rows go
    assert reasons[0] == ["normal"] * 1000 and reasons[3] == names


@pytest.mark.django_db(transaction=True)
def test_batched_writes_on_the_real_database():
    """The array statements against Postgres, through a real broker: rows for each live
    connection (one client id reconnecting keeps one row), gone when they leave, with the last
    disconnect reason on the device."""
    import time

    from tenants.devices import services as device_services
    from tenants.models import Device, DeviceConnection
    from tenants.tenant import services as tenant_services
    from tests.broker.clients import Paho
    from tests.tenancy.test_broker_tenancy import running_pg_broker

    acme = tenant_services.tenant_create("acme")
    _, secret = device_services.device_create(tenant=acme, name="d1", client_id_policy="any")
    _, other = device_services.device_create(tenant=acme, name="d2", client_id_policy="any")

    def rows():
        return sorted(DeviceConnection.objects.values_list("device__name", "client_id"))

    def wait(predicate, within=10.0):
        deadline = time.monotonic() + within
        while not predicate():
            assert time.monotonic() < deadline, rows()
            time.sleep(0.05)

    with running_pg_broker() as port:
        clients = [Paho(port, "acme/d1", secret, f"c{i}") for i in range(20)]
        clients.append(Paho(port, "acme/d2", other, "solo"))
        wait(lambda: len(rows()) == 21)
        # Taken over, paho would reconnect a second later and take c0 back, then `again` would:
        # the device's last reason would flip to "takenover" every second.
        clients[0].client._reconnect_on_failure = False
        again = Paho(port, "acme/d1", secret, "c0")  # takes over c0's session
        wait(lambda: Device.objects.get(name="d1").last_disconnect_reason == "takenover")
        assert len(rows()) == 21 and ("d1", "c0") in rows()
        for client in clients[1:20]:
            client.close()
        wait(lambda: rows() == [("d1", "c0"), ("d2", "solo")])
        assert Device.objects.get(name="d1").last_disconnect_reason == "normal"
        for client in (again, clients[20], clients[0]):
            client.close()
        wait(lambda: rows() == [])

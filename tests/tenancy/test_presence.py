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

    @asynccontextmanager
    async def connection(self):
        if not self.up:
            raise OSError("database away")
        pool = self

        class Cursor:
            async def execute(self, sql, params=()):
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
    written = [params[0] for s, params in pool.statements if s.startswith("INSERT")]
    assert written == ["d6", "d7"]  # exactly who is connected now

"""The live view's bounds across web processes, on the real Redis they share: two `Seats` are two
processes. A process that dies without giving its seats back does not hold them for ever, one
that lives keeps them, and a Redis outage leaves each process's own bounds in force."""

from __future__ import annotations

import asyncio
import secrets

import pytest
from redis.asyncio import Redis

from common.runtime import embedded
from common.runtime.embedded import free_port
from tenants.portal import live_seats
from tenants.portal.live_seats import Bounds, Refused, Seat, Seats
from tenants.portal.live_tally import Tally


@pytest.fixture
async def redis():
    client = Redis.from_url(embedded.redis_url(), socket_timeout=2)
    yield client
    await client.aclose()


@pytest.fixture
def tenant() -> str:
    return f"t{secrets.token_hex(4)}"  # keys of their own: the tests' Redis is shared


@pytest.fixture
def short_ttl(monkeypatch):
    monkeypatch.setattr(live_seats, "SEAT_TTL", 1.0)
    monkeypatch.setattr(live_seats, "KEEP_ALIVE", 0.3)


async def test_bounds_hold_across_processes(redis, tenant):
    bounds = Bounds(per_member=2, per_tenant=3)
    web1, web2 = Seats(bounds, redis), Seats(bounds, redis)
    assert isinstance(await web1.take(tenant, "alice"), Seat)
    assert isinstance(await web2.take(tenant, "alice"), Seat)
    over = await web1.take(tenant, "alice")  # her third, though each process holds one
    assert isinstance(over, Refused) and over.limit == "member"
    assert "2 live pages" in over.words

    bob = await web2.take(tenant, "bob")
    assert isinstance(bob, Seat)
    over = await web1.take(tenant, "carol")
    assert isinstance(over, Refused) and over.limit == "tenant"
    assert await web1.counts(tenant, ["alice", "bob"]) == (3, {"alice": 2, "bob": 1})

    await web2.give_back(bob)
    assert isinstance(await web1.take(tenant, "carol"), Seat)


async def test_a_dead_process_seats_lapse_and_a_live_ones_stay(redis, tenant, short_ttl):
    bounds = Bounds(per_member=1, per_tenant=10)
    dead, alive, other = Seats(bounds, redis), Seats(bounds, redis), Seats(bounds, redis)
    assert isinstance(await dead.take(tenant, "alice"), Seat)
    assert isinstance(await alive.take(tenant, "bob"), Seat)
    dead._keeper.cancel()  # killed: nothing is given back, nothing kept alive
    assert isinstance(await other.take(tenant, "alice"), Refused)
    await asyncio.sleep(1.6)
    assert isinstance(await other.take(tenant, "alice"), Seat)  # lapsed
    assert isinstance(await other.take(tenant, "bob"), Refused)  # kept alive all along


async def test_without_redis_each_process_keeps_its_own_bounds(tenant):
    gone = Redis.from_url(f"redis://127.0.0.1:{free_port()}/0", socket_connect_timeout=0.5)
    seats = Seats(Bounds(per_member=2, per_tenant=5), gone)
    first, second = await seats.take(tenant, "alice"), await seats.take(tenant, "alice")
    assert isinstance(first, Seat) and not first.shared and isinstance(second, Seat)
    assert isinstance(await seats.take(tenant, "alice"), Refused)
    assert await seats.counts(tenant, ["alice"]) == (2, {"alice": 2})
    await seats.give_back(first)
    assert isinstance(await seats.take(tenant, "alice"), Seat)
    await gone.aclose()


async def test_messages_shown_add_up_across_processes(redis, tenant):
    web1, web2 = Tally(redis), Tally(redis)
    web1.count(tenant, 40, 3)
    web2.count(tenant, 2, 0)
    assert await web1.totals(tenant) == {"shown": 40, "not_shown": 3}
    assert await web2.totals(tenant) == {"shown": 42, "not_shown": 3}
    assert await web1.totals(tenant) == {"shown": 42, "not_shown": 3}  # nothing counted twice

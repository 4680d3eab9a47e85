"""Membership owns liveness and announces it (data_plane.cluster.membership); the route channel
tells it what it sees (data_plane.cluster.their_routes) through the narrow `Sightings` it is
given. Each room is built from what it uses, the bus a fake that answers the few commands a beat
sends, so the tests need no Redis."""

from __future__ import annotations

import asyncio
import json

from data_plane.cluster.bus import Bus
from data_plane.cluster.keys import Keys
from data_plane.cluster.membership import Membership
from data_plane.cluster.routes import RouteTable, route_key
from data_plane.cluster.their_routes import TheirRoutes

KEYS = Keys("test")
ROUTE = route_key("acme", "t/#", None)


class FakeRedis:
    """The bus as a beat sees it: members, node descriptions, route versions, purge locks."""

    def __init__(self, members: set[str], values: dict[str, bytes]) -> None:
        self.members = {m.encode() for m in members}
        self.values = values
        self.locks: set[str] = set()

    def pipeline(self, transaction: bool = False) -> FakePipe:
        return FakePipe(self)

    async def delete(self, *keys: str) -> int:
        return 0

    async def set(self, key: str, value: str, nx: bool = False, px: int = 0) -> bool | None:
        if key in self.locks:
            return None
        self.locks.add(key)
        return True


class FakePipe:
    def __init__(self, redis: FakeRedis) -> None:
        self.redis, self.answers = redis, []

    def set(self, *args, **kwargs) -> None:
        self.answers.append(True)

    def sadd(self, *args) -> None:
        self.answers.append(0)  # already a member

    def exists(self, *args) -> None:
        self.answers.append(1)  # Redis kept our data

    def smembers(self, *args) -> None:
        self.answers.append(set(self.redis.members))

    def mget(self, keys: list[str]) -> None:
        self.answers.append([self.redis.values.get(key) for key in keys])

    async def execute(self) -> list:
        return self.answers


class OwnRoutes:
    synced = True

    async def rewrite(self) -> None:
        raise AssertionError("nothing was lost: no rewrite")

    def out_of_step(self) -> None:
        self.synced = False


def _membership(redis: FakeRedis, table: RouteTable) -> Membership:
    bus = Bus("a", KEYS, redis, redis, heartbeat=2.0)
    return Membership(bus, {"node": "a"}, table, OwnRoutes(), tasks=[])  # type: ignore[arg-type]


async def test_a_dead_node_is_announced_once_and_stays_routed_to_until_its_place_is_taken():
    """b beats, c stopped (its key expired) with routes still in the table: c is dying (still
    forwarded to), one survivor takes its place, and once every node switched it is gone."""
    table = RouteTable()
    table.replace("c", 1, {ROUTE})
    values = {KEYS.node("b"): json.dumps({"node": "b"}).encode(), KEYS.version("b"): b"3"}
    membership = _membership(FakeRedis({"a", "b", "c"}, values), table)
    membership.bus_up, membership.alive = True, {"c": {"node": "c"}}
    versions: list[dict[str, int]] = []
    places: list[str] = []
    switched = asyncio.Event()

    async def follow_versions(seen: dict[str, int]) -> None:
        versions.append(seen)

    async def take_place(dead: str, done) -> None:
        places.append(dead)
        done(dead)  # every node switched from the dead node to this one
        switched.set()

    membership.on_versions.append(follow_versions)
    membership.take_place = take_place
    await membership.beat()
    assert membership.alive == {"b": {"node": "b"}} and membership.dying == {"c"}
    assert versions == [{"b": 3}]  # announced: `their_routes` loads what it lacks
    await asyncio.wait_for(switched.wait(), 1)
    assert places == ["c"] and membership.dying == set() and "c" not in table.nodes
    await membership.beat()  # the purge lock is taken: nobody takes its place twice
    await asyncio.sleep(0)
    assert places == ["c"]


class Sightings:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def seen(self, node_id: str) -> None:
        self.events.append(("seen", node_id))

    def gone(self, node_id: str) -> None:
        self.events.append(("gone", node_id))


def test_the_route_channel_tells_what_it_sees_and_applies_the_deltas():
    table, sightings, breaks = RouteTable(), Sightings(), []
    bus = Bus("a", KEYS, None, None, heartbeat=2.0)
    routes = TheirRoutes(
        bus, table, sightings, on_break=lambda: breaks.append(1), on_fence=lambda _: None
    )
    table.replace("s", 4, set())
    # A survivor s took dead d's place: every node switches at once; s wrote, so it lives.
    change = {"node": "s", "version": 5, "added": [ROUTE], "replaces": "d"}
    routes.on_message(json.dumps(change).encode())
    assert sightings.events == [("gone", "d"), ("seen", "s")]
    assert ROUTE in table.nodes["s"].routes
    routes.on_message(json.dumps({"node": "s", "left": True}).encode())
    assert sightings.events[-1] == ("gone", "s")
    routes.on_message(json.dumps({"node": "a", "left": True}).encode())  # our own: ignored
    assert len(sightings.events) == 3 and breaks == []

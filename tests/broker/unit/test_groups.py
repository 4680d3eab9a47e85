"""`groups`: a shared group keeps its messages while no member is online and hands them to the
next member in publish order, lending each until the member acknowledges it (issue 45)."""

from __future__ import annotations

import asyncio
import time

from common.mqtt.codec import Reader
from common.mqtt.packets import MQTT_5_0, Publish, Subscription
from data_plane.broker.broker import Broker
from data_plane.broker.message import Message
from tests.broker.unit.fakes import FakeConnection, make_broker, open_session, told

GROUP = "$share/workers/jobs/#"


def _publish(broker: Broker, payload: str, qos: int = 1) -> None:
    broker.publish(Message("jobs/a", payload.encode(), qos, False, tenant="acme", publisher="p"))


def _received(conn: FakeConnection) -> list[Publish]:
    reader = Reader(server_side=False, protocol_version=MQTT_5_0)
    packets = [p for data in conn.sent for p in reader.feed(data)]
    return [p for p in packets if isinstance(p, Publish)]


def _member(broker: Broker, device: str, quota: dict | None = None) -> FakeConnection:
    conn = FakeConnection(broker, device=device)
    session = open_session(broker, conn)
    session.quota = quota
    broker.subscribe(session, Subscription(GROUP, 1), None)
    return conn


def _gone(broker: Broker, conn: FakeConnection) -> None:
    """The member's client goes: its clean session ends."""
    broker.detach(conn.session, conn)


async def _drained(broker: Broker) -> None:
    for _ in range(200):
        if all(h.task is None for h in broker.groups.all()):
            return
        await asyncio.sleep(0.005)


async def test_a_group_without_members_keeps_its_messages_for_the_next_in_order():
    broker = make_broker()
    first = _member(broker, "d1")
    _publish(broker, "live")
    (live,) = _received(first)
    assert live.payload == b"live"
    broker.settled(first.session, first.session.puback(live.packet_id))
    _gone(broker, first)
    for i in range(5):
        _publish(broker, f"m{i}")
    (holder,) = broker.groups.all()
    assert holder.depth == 5  # nobody to take them: kept
    late = _member(broker, "d2")
    _publish(broker, "m5")  # while the held ones drain: behind them
    await _drained(broker)
    assert [p.payload.decode() for p in _received(late)] == [f"m{i}" for i in range(6)]
    assert holder.depth == 6  # lent: each stays held until the member acknowledges it
    for publish in _received(late):
        broker.settled(late.session, late.session.puback(publish.packet_id))
    assert holder.depth == 0


async def test_what_a_leaving_member_did_not_acknowledge_goes_back_to_the_group():
    broker = make_broker()
    first = _member(broker, "d1")
    _gone(broker, first)
    for i in range(3):
        _publish(broker, f"m{i}")
    taker = _member(broker, "d2")
    await _drained(broker)
    got = _received(taker)
    assert len(got) == 3
    broker.settled(taker.session, taker.session.puback(got[0].packet_id))  # one acknowledged
    _gone(broker, taker)  # gone with two unacknowledged
    (holder,) = broker.groups.all()
    assert holder.depth == 2
    next_one = _member(broker, "d1")
    await _drained(broker)
    assert [p.payload for p in _received(next_one)] == [b"m1", b"m2"]


async def test_qos0_waits_only_where_the_tenant_keeps_it_and_the_bounds_refuse_the_rest():
    broker = make_broker()
    dropped = told(broker, "message.dropped")
    refused = told(broker, "quota.exceeded")
    member = _member(broker, "d1", {"max_group_messages": 2, "max_group_bytes": 10**6})
    _gone(broker, member)
    _publish(broker, "q0", qos=0)
    for i in range(3):
        _publish(broker, f"m{i}")
    (holder,) = broker.groups.all()
    assert holder.depth == 2
    assert [d[2] for d in dropped] == ["offline_qos0", "group_full"]
    assert [r[1] for r in refused] == ["group_messages"]


async def test_a_group_s_retention_ends_what_it_keeps():
    broker = make_broker()
    member = _member(broker, "d1", {"group_retention": 0})
    _gone(broker, member)
    _publish(broker, "stale")
    await asyncio.sleep(0.01)
    assert broker.groups.all() == []  # no member for its retention: the group went
    assert broker.router.match("acme", "jobs/a") == ([], [])


async def test_a_tenant_s_groups_are_capped_and_another_tenant_never_reaches_them():
    broker = make_broker()
    _member(broker, "d1", {"max_shared_groups": 1})
    quota = {"max_shared_groups": 1}
    assert broker.groups.over_cap("acme", quota, "$share/other/jobs/#")
    assert not broker.groups.over_cap("acme", quota, GROUP)  # joining the one it has
    assert not broker.groups.over_cap("acme", quota, "jobs/#")  # not a group
    assert not broker.groups.over_cap("rival", quota, GROUP)  # its own first group
    assert broker.forget_group("rival", "workers", "jobs/#") is False
    assert broker.forget_group("acme", "workers", "jobs/#") is True


async def test_a_copy_a_member_can_never_take_is_dropped_not_lent_again_and_again():
    broker = make_broker()
    dropped = told(broker, "message.dropped")
    first = _member(broker, "d1")
    _gone(broker, first)
    _publish(broker, "x" * 100)
    small = FakeConnection(broker, device="d2")
    small.client_maximum_packet_size = 50  # the held message is larger than it takes
    session = open_session(broker, small)
    broker.subscribe(session, Subscription(GROUP, 1), None)
    await _drained(broker)
    (holder,) = broker.groups.all()
    assert holder.depth == 0 and holder.task is None  # dropped once, counted, not retried
    assert [d[2] for d in dropped] == ["too_large"]


async def test_held_messages_take_places_in_time_order_that_another_holder_does_not_take():
    broker = make_broker()
    first = _member(broker, "d1")
    _gone(broker, first)
    (holder,) = broker.groups.all()
    places = []
    for _ in range(1000):
        places.append(holder.next_seq())
        holder.session.next_seq = places[-1]  # (as persisting takes it)
    assert places == sorted(set(places))  # strictly increasing, whatever the clock's grain
    assert {place & 1023 for place in places} == {holder.salt}
    assert abs((places[0] >> 10) - time.time() * 1e6) < 10e6  # microseconds since 1970


async def test_a_member_joining_mid_drain_takes_its_share_and_nothing_comes_twice():
    broker = make_broker()
    first = _member(broker, "d1")
    _gone(broker, first)
    for i in range(3000):
        _publish(broker, f"m{i}")
    one = _member(broker, "d1")
    await asyncio.sleep(0)  # the drain's first batch: its room is one's
    two = _member(broker, "d2")  # joins while most is still held
    seen: dict[FakeConnection, list[Publish]] = {one: [], two: []}
    for _ in range(400):
        for conn, got in seen.items():
            fresh = _received(conn)[len(got) :]
            for publish in fresh:  # acknowledged as they come: room for more
                broker.settled(conn.session, conn.session.puback(publish.packet_id))
            got.extend(fresh)
        if sum(map(len, seen.values())) >= 3000:
            break
        await asyncio.sleep(0.005)
    payloads = [p.payload.decode() for got in seen.values() for p in got]
    assert sorted(payloads) == sorted(f"m{i}" for i in range(3000))  # all, once
    assert len(seen[one]) > 0 and len(seen[two]) > 0  # the newcomer took its share


class Taking:
    """The cluster as a group's hand-over sees it: another node keeps the group until
    `handed` is set."""

    def __init__(self) -> None:
        self.handed: asyncio.Future[None] | None = None
        self.asked: list[tuple[str, str, str]] = []

    def route_changed(self, *change) -> None:
        pass

    def hand_held(self, *held) -> None:
        return None

    async def fence(self) -> None:
        raise AssertionError("no replay here")

    def take_group(self, tenant: str, topic_filter: str, name: str) -> asyncio.Future[None]:
        self.asked.append((tenant, topic_filter, name))
        self.handed = asyncio.get_running_loop().create_future()
        return self.handed


async def test_a_first_member_gets_what_another_node_kept_before_the_live_messages():
    from data_plane.broker.ports import Ports
    from data_plane.cluster.regroup import serve_here
    from data_plane.config import BrokerConfig
    from data_plane.tenancy.static import StaticAuthenticator
    from tests.broker.unit.fakes import TENANTS

    cluster = Taking()
    broker = Broker(
        BrokerConfig(port=0, ws_port=0, sys_interval=0),
        StaticAuthenticator(TENANTS),
        Ports(cluster=cluster),  # type: ignore[arg-type]
    )
    member = _member(broker, "d1")
    assert cluster.asked == [("acme", "jobs/#", "workers")]
    (holder,) = broker.groups.all()
    assert holder.awaiting
    for i in (3, 4):
        broker.route(Message("jobs/a", f"m{i}".encode(), 1, False, tenant="acme"))  # live
    assert _received(member) == []  # kept behind what the other node kept
    for i in (1, 2):  # the other node's kept copies, handed over: past the wait
        serve_here(broker, Message("jobs/a", f"m{i}".encode(), 1, False, tenant="acme"),
                   (("jobs/#", "workers"),), [])  # fmt: skip
    assert [p.payload for p in _received(member)] == [b"m1", b"m2"]
    cluster.handed.set_result(None)  # every holder answered
    await asyncio.sleep(0)
    await _drained(broker)
    assert [p.payload for p in _received(member)] == [b"m1", b"m2", b"m3", b"m4"]
    _member(broker, "d2")  # a second member here: nothing more to take
    assert len(cluster.asked) == 1

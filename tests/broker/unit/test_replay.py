"""`replay`: `$replay/{from}/{filter}` — the history first, the live messages held behind it,
the cut between them at a millisecond; and how such a filter is read."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from common.mqtt.codec import Reader
from common.mqtt.errors import TopicFilterInvalid
from common.mqtt.packets import MQTT_5_0, Publish, Subscription
from common.mqtt.topics import parse_replay, routed_filter
from data_plane.broker.broker import Broker
from data_plane.broker.message import Message
from data_plane.broker.ports import Fence, Ports
from data_plane.config import BrokerConfig
from data_plane.tenancy.static import StaticAuthenticator
from tests.broker.unit.fakes import TENANTS, FakeConnection, open_session, told


class FakeHistory:
    """Three archived messages; the read waits until `release` (a slow archive)."""

    writer = "here"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.asked: list[tuple] = []
        self.ends: list[dict | None] = []

    def horizon(self, tenant: str) -> float | None:
        return time.time() - 3600

    async def written(self) -> None:
        return None

    def read(self, tenant, topic_filter, start_ms, end_ms, ends=None):
        self.asked.append((tenant, topic_filter, start_ms, end_ms))
        self.ends.append(ends)
        self.release.wait(5)
        yield [Message(f"t/{i}", f"old{i}".encode(), 1, False, tenant=tenant) for i in range(3)]


def _received(conn: FakeConnection) -> list[bytes]:
    reader = Reader(server_side=False, protocol_version=MQTT_5_0)
    packets = [p for data in conn.sent for p in reader.feed(data)]
    return [p.payload for p in packets if isinstance(p, Publish)]


async def test_the_history_goes_first_and_the_live_messages_wait_behind_it():
    history = FakeHistory()
    broker = Broker(
        BrokerConfig(port=0, ws_port=0, sys_interval=0),
        StaticAuthenticator(TENANTS),
        Ports(history=history),
    )
    conn = FakeConnection(broker)
    session = open_session(broker, conn)
    replayed = told(broker, "session.replayed")
    before = int(time.time() * 1000)
    broker.subscribe(session, Subscription("$replay/1h/t/#", 1), None)
    ((tenant, topic_filter, start_ms, end_ms),) = await _asked(history)
    assert (tenant, topic_filter) == ("acme", "t/#")
    assert before < end_ms <= int(time.time() * 1000)  # the cut: the next millisecond
    assert abs(start_ms - (end_ms - 3_600_000)) < 1000
    broker.publish(Message("t/live", b"live", 1, False, tenant="acme", publisher="p"))
    assert _received(conn) == []  # held behind the replay
    units = broker.stats["acme"].message_units
    history.release.set()
    for _ in range(100):
        if len(_received(conn)) == 4:
            break
        await asyncio.sleep(0.01)
    assert _received(conn) == [b"old0", b"old1", b"old2", b"live"]
    assert [(r[0], r[1], r[3]) for r in replayed] == [(session, "t/#", 3)]  # the journey's event
    # Billed: each replayed message read from history and delivered (a unit each), the live one
    # delivered.
    assert broker.stats["acme"].message_units - units == 3 + 3 + 1


async def _asked(history: FakeHistory) -> list[tuple]:
    for _ in range(100):
        if history.asked:
            return history.asked
        await asyncio.sleep(0.01)
    raise AssertionError("the archive was never read")


class FakeCluster:
    """Another node whose cut comes when `answer` is set: its writer's rows up to 777 and its
    publishes up to count 5 are the replay's."""

    def __init__(self) -> None:
        self.answer = asyncio.Event()

    def route_changed(self, *change) -> None:
        pass

    def hand_held(self, *held) -> None:
        return None

    def take_group(self, *group) -> None:
        return None

    async def fence(self) -> Fence:
        await self.answer.wait()
        return Fence(ends={"there": 777}, counts={"n2": 5})


def _copy(topic: str, payload: bytes, seq: int) -> Message:
    """A message node n2 forwarded, as the cluster routes it here (its origin on it)."""
    message = Message(topic, payload, 1, False, tenant="acme", publisher="p2")
    message.cluster_origin = ("n2", seq)
    return message


async def test_another_nodes_copies_before_its_cut_are_the_replays_not_sent_twice():
    history, cluster = FakeHistory(), FakeCluster()
    broker = Broker(
        BrokerConfig(port=0, ws_port=0, sys_interval=0),
        StaticAuthenticator(TENANTS),
        Ports(history=history, cluster=cluster),  # type: ignore[arg-type]
    )
    conn = FakeConnection(broker)
    session = open_session(broker, conn)
    broker.subscribe(session, Subscription("other/#", 1), None)
    broker.subscribe(session, Subscription("$replay/1h/t/#", 1), None)
    # Copies from n2 while its cut is not known yet: all wait behind the replay.
    broker.route(_copy("t/a", b"four", 4))  # before n2's cut: the replay reads it
    broker.route(_copy("t/b", b"six", 6))  # after: live
    broker.route(_copy("other/x", b"other", 3))  # another subscription: not replayed
    await asyncio.sleep(0.05)
    assert history.asked == []  # the archive is read once the cuts are known
    cluster.answer.set()
    await _asked(history)
    assert history.ends == [{"here": history.asked[0][3], "there": 777}]
    broker.route(_copy("t/c", b"five", 5))  # before n2's cut, arriving late: screened out
    broker.route(_copy("t/d", b"seven", 7))
    history.release.set()
    for _ in range(100):
        if len(_received(conn)) == 6:
            break
        await asyncio.sleep(0.01)
    assert _received(conn) == [b"old0", b"old1", b"old2", b"six", b"other", b"seven"]


def test_a_replay_filter_says_when_and_what():
    assert parse_replay("$replay/90s/a/#", 1000.0) == (910.0, "a/#")
    assert parse_replay("$replay/7d/a", 10**6) == (10**6 - 7 * 86_400, "a")
    assert parse_replay("$replay/2026-12-06T10:00:00Z/a/+", 0)[0] == 1_796_551_200
    assert parse_replay("a/#", 0) == (None, "a/#")
    assert routed_filter("$replay/1h/a/#") == (None, "a/#")
    for bad in (
        "$replay/1h",
        "$replay/soon/a",
        "$replay/2026-12-06T10:00:00/a",
        "$replay/1h/a/#/b",
    ):
        with pytest.raises(TopicFilterInvalid):
            parse_replay(bad, 0)
    with pytest.raises(TopicFilterInvalid):
        parse_replay("$replay/1h/$share/g/a", 0)

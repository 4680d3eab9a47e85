"""Back-pressure across nodes at the unit level (data_plane.cluster.backpressure): the stream
reader held by the sessions it backs up, and the forwarder's decision that a destination's
stream is backed up.

A real broker and real sessions; the client is a fake whose writes are paused until the test
drains it (a slow reader), and Redis a fake that records what is sent in each pipeline.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from redis.exceptions import ConnectionError as RedisConnectionError

from common.mqtt.packets import Subscription
from data_plane.broker.broker import Broker
from data_plane.broker.flow import ReadGate
from data_plane.broker.message import Message
from data_plane.broker.session import Session
from data_plane.cluster import backpressure, codec, receive
from data_plane.cluster.backpressure import PAUSE_ENTRIES, RESUME_ENTRIES, Backlogs
from data_plane.cluster.bus import Bus
from data_plane.cluster.departed import Departed
from data_plane.cluster.exactly import Origins
from data_plane.cluster.forward import Forwarder
from data_plane.cluster.keys import Keys
from data_plane.cluster.receive import Receiver
from data_plane.config import BrokerConfig
from data_plane.tenancy.static import StaticAuthenticator
from tests.broker.test_ports import FakeClient

STREAM = "s:me"


class Pipe:
    def __init__(self, redis: FakeRedis) -> None:
        self.redis = redis
        self.commands: list[tuple] = []

    def __getattr__(self, name: str):
        return lambda *args, **kwargs: self.commands.append((name, args, kwargs))

    async def execute(self) -> list:
        self.redis.pipelines.append(self.commands)
        if self.redis.fail:
            raise RedisConnectionError("bus down")
        lengths = self.redis.lengths
        return [
            (lengths.pop(0) if len(lengths) > 1 else lengths[0]) if name == "xlen" else b"1-0"
            for name, _, _ in self.commands
        ]


class FakeRedis:
    def __init__(self, lengths: list[int] | None = None) -> None:
        self.pipelines: list[list[tuple]] = []
        self.lengths = lengths or [0]  # what XLEN answers, in turn (the last one stays)
        self.fail = False

    def pipeline(self, transaction: bool = False) -> Pipe:
        return Pipe(self)

    async def xreadgroup(self, *args, **kwargs) -> list:  # the stream has nothing more
        return []

    def acked(self) -> list[bytes]:
        return [
            i for p in self.pipelines for name, args, _ in p if name == "xack" for i in args[2:]
        ]


def _subscriber(broker: Broker, qos: int, max_queued: int = 1000) -> tuple[Session, FakeClient]:
    client = FakeClient("slow")
    session, _ = broker.open_session(client, "acme", "slow", "d1", True, 0, max_queued)
    client.session = session
    broker.subscribe(session, Subscription("t/#", qos), None)
    return session, client


def _receiver() -> tuple[Receiver, Broker]:
    auth = StaticAuthenticator({"acme": {"devices": {"d1": {"password": "p"}}}})
    broker = Broker(BrokerConfig(port=0, ws_port=0, sys_interval=0), auth)
    dropped: dict[str, int] = {}
    reader = FakeRedis()
    receiver = Receiver(
        Bus("me", Keys("test"), reader, reader, 2.0),
        sessions=SimpleNamespace(on_control=lambda body: None),
        departed=Departed(reader, Origins("me").second_copy),
        drop=lambda reason, n: dropped.__setitem__(reason, n),
        handover=lambda *marker: None,
    )
    receiver.attach(broker)
    return receiver, broker


def _entries(count: int, per_entry: int, qos: int) -> list[tuple[bytes, dict]]:
    """`count` stream entries from node "other", each `per_entry` messages on t/a."""
    entries, sent = [], 0
    for index in range(count):
        batch = b""
        for _ in range(per_entry):
            sent += 1
            message = Message("t/a", str(sent).encode(), qos, False, tenant="acme", publisher="p")
            batch += codec.encode(message, codec.DELIVER, seq=sent)
        entries.append((f"{index + 1}-0".encode(), {b"m": batch, b"w": b"other", b"c": sent}))
    return entries


def _drain(session: Session, client: FakeClient) -> None:
    """The client reads what was sent and waits in the queue, then is slow again."""
    client.write_paused = False
    session.pump()
    client.write_paused = True


async def test_the_reader_stops_where_a_qos0_subscriber_backs_up_and_resumes_as_it_drains():
    receiver, broker = _receiver()
    session, client = _subscriber(broker, 0)
    half = Session.QOS0_QUEUE_LIMIT // 2
    task = asyncio.create_task(receiver._deliver(STREAM, _entries(2, 100, 0)))
    await asyncio.sleep(0.05)
    # Stopped in the first entry, at the hold mark: nothing dropped, nothing acknowledged.
    assert not task.done()
    assert receiver.received == half and session.queued_qos0 == half
    assert receiver.hold.throttled_by == {session} and receiver.bus.reader.acked() == []
    while not task.done():
        _drain(session, client)  # releases the reader: it queues up to the mark again
        await asyncio.sleep(0.01)
    _drain(session, client)
    assert len(client.sent) == 200 and session.dropped == 0
    assert receiver.bus.reader.acked() == [b"1-0", b"2-0"]
    assert receiver.hold.holds >= 4 and receiver.hold.expired == 0


async def test_a_subscriber_that_never_drains_holds_the_reader_only_for_the_allowance(
    monkeypatch,
):
    monkeypatch.setattr(ReadGate, "THROTTLE_LIMIT", 0.3)  # a fan-in: only its messages wait
    receiver, broker = _receiver()
    session, client = _subscriber(broker, 0)
    started = time.monotonic()
    await asyncio.wait_for(receiver._deliver(STREAM, _entries(2, 100, 0)), 5)
    # Held 0.3 s, then the reader went on without it: past its QoS 0 cap its messages drop.
    assert time.monotonic() - started >= 0.29
    assert receiver.hold.expired == 1 and receiver.hold.holds == 1
    assert session.queued_qos0 == Session.QOS0_QUEUE_LIMIT
    assert session.dropped == 200 - Session.QOS0_QUEUE_LIMIT
    assert receiver.bus.reader.acked() == [b"1-0", b"2-0"]
    # Skipped until it drains (not `stalled`: its own node's publishers may still be held).
    assert not session.stalled and set(receiver.hold.skipped) == {session}
    await receiver._deliver(STREAM, _entries(1, 10, 0))
    assert receiver.hold.holds == 1  # not waited for again
    _drain(session, client)
    assert not receiver.hold.skipped  # drained: it may hold the reader again


async def test_a_skipped_subscriber_may_hold_the_reader_again_after_a_while(monkeypatch):
    # A steady flood never lets it drain to its release mark: the skip ends by time too.
    monkeypatch.setattr(ReadGate, "THROTTLE_LIMIT", 0.2)
    monkeypatch.setattr(backpressure, "SKIP_FOR", 0.3)
    receiver, broker = _receiver()
    session, _client = _subscriber(broker, 0)
    await asyncio.wait_for(receiver._deliver(STREAM, _entries(1, 100, 0)), 5)
    assert receiver.hold.expired == 1 and set(receiver.hold.skipped) == {session}
    await receiver._deliver(STREAM, _entries(1, 10, 0))
    assert receiver.hold.holds == 1  # skipped: not waited for
    await asyncio.sleep(0.35)
    await asyncio.wait_for(receiver._deliver(STREAM, _entries(1, 10, 0)), 5)
    assert receiver.hold.holds == 2 and receiver.hold.expired == 2  # held (and expired) again


async def test_a_stuck_subscriber_holds_the_reader_only_briefly_when_others_wait_behind(
    monkeypatch,
):
    """The reader serves every session of its node: when messages for others wait behind the
    hold, the stuck one holds it only SHARED_HOLD_LIMIT, not a connection's 2 s."""
    monkeypatch.setattr(ReadGate, "THROTTLE_LIMIT", 5.0)
    monkeypatch.setattr(backpressure, "SHARED_HOLD_LIMIT", 0.2)
    receiver, broker = _receiver()
    stuck, _ = _subscriber(broker, 0)
    other = FakeClient("other")
    other.write_paused = False  # reads everything at once
    session, _ = broker.open_session(other, "acme", "other", "d1", True, 0, 1000)
    other.session = session
    broker.subscribe(session, Subscription("u/#", 0), None)
    batch = b""
    for i in range(200):  # interleaved: t/a for the stuck one, u/a for the other
        message = Message("tu"[i % 2] + "/a", b"m", 0, False, tenant="acme", publisher="p")
        batch += codec.encode(message, codec.DELIVER, seq=i + 1)
    started = time.monotonic()
    await asyncio.wait_for(receiver._deliver(STREAM, [(b"1-0", {b"m": batch})]), 3)
    assert 0.19 <= time.monotonic() - started < 1.0
    assert receiver.hold.expired == 1 and len(other.sent) == 100


async def test_with_commits_pending_the_reader_stops_only_between_entries(monkeypatch):
    """A stream mark commits with the deliveries it covers, whole entries (inherit.py): the
    reader held by a QoS 1 subscriber of a persistent session finishes the entry, marks and
    acknowledges it, and only then waits."""
    marks: list[bytes] = []
    monkeypatch.setattr(receive, "stream_mark", lambda broker, node, entry: marks.append(entry))
    receiver, broker = _receiver()
    session, client = _subscriber(broker, 1, max_queued=20)  # holds from 10 queued

    def persist(session, delivery):  # the storage layer's commit of the durable copy
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    session.persist = persist
    task = asyncio.create_task(receiver._deliver(STREAM, _entries(2, 15, 1)))
    await asyncio.sleep(0.05)
    assert not task.done()
    assert receiver.received == 15 and len(session.queue) == 15  # the whole first entry
    assert marks == [b"1-0"] and receiver.bus.reader.acked() == [b"1-0"]
    client.client_receive_maximum = 1000
    while not task.done():
        _drain(session, client)
        await asyncio.sleep(0.01)
    assert receiver.received == 30 and session.dropped == 0
    assert marks == [b"1-0", b"2-0"] and receiver.bus.reader.acked() == [b"1-0", b"2-0"]


async def test_acknowledged_entries_are_trimmed_at_once():
    receiver, broker = _receiver()
    await receiver._deliver(STREAM, _entries(3, 2, 0))
    [pipe] = receiver.bus.reader.pipelines
    assert [name for name, _, _ in pipe] == ["xack", "xtrim"]
    assert pipe[1][2] == {"minid": b"3-0", "approximate": False}


class Gate:
    """A publisher's read gate as a Backlog sees it."""

    def __init__(self) -> None:
        self.released: list = []

    def unthrottle_by(self, backlog) -> None:
        self.released.append(backlog)


async def test_a_destination_past_the_mark_holds_its_publishers_until_down_to_resume():
    backlogs = Backlogs(FakeRedis([PAUSE_ENTRIES]), lambda node: f"s:{node}")
    backlogs.update(["a", "b"], [PAUSE_ENTRIES - 1, 3])
    assert not backlogs.lagging and backlogs.slowing(["a", "b"]) == ()
    backlogs.update(["a", "b"], [PAUSE_ENTRIES, 3])
    (backlog,) = backlogs.slowing(["a", "b"])
    assert backlog.node_id == "a" and backlogs.slowing(["b"]) == ()
    gate = Gate()
    backlog.hold(gate)
    backlogs.update(["a"], [RESUME_ENTRIES + 1])  # between the two marks: still held
    assert backlogs.slowing(["a"]) == (backlog,) and gate.released == []
    backlogs.update(["a"], [RESUME_ENTRIES])
    assert gate.released == [backlog] and not backlogs.lagging
    assert backlogs.paused == 1


async def test_a_stalled_backlog_holds_nobody(monkeypatch):
    backlogs = Backlogs(FakeRedis([PAUSE_ENTRIES]), lambda node: f"s:{node}")
    backlogs.update(["a"], [PAUSE_ENTRIES])
    backlogs.lagging["a"].stalled = True  # what the read gate does after its allowance
    assert backlogs.slowing(["a"]) == ()


async def test_while_a_destination_lags_its_length_is_read_again_until_it_drains(monkeypatch):
    monkeypatch.setattr(backpressure, "RECHECK", 0.01)
    redis = FakeRedis([PAUSE_ENTRIES * 2, PAUSE_ENTRIES, RESUME_ENTRIES])
    backlogs = Backlogs(redis, lambda node: f"s:{node}")
    backlogs.update(["a"], [PAUSE_ENTRIES * 3])
    gate = Gate()
    backlogs.lagging["a"].hold(gate)
    for _ in range(100):
        if gate.released:
            break
        await asyncio.sleep(0.01)
    assert len(gate.released) == 1 and not backlogs.lagging
    assert all(p == [("xlen", ("s:a",), {})] for p in redis.pipelines) and len(redis.pipelines) == 3


async def test_a_bus_that_does_not_answer_holds_nobody(monkeypatch):
    monkeypatch.setattr(backpressure, "RECHECK", 0.01)
    redis = FakeRedis([PAUSE_ENTRIES])
    backlogs = Backlogs(redis, lambda node: f"s:{node}")
    backlogs.update(["a"], [PAUSE_ENTRIES])
    gate = Gate()
    backlogs.lagging["a"].hold(gate)
    redis.fail = True
    await asyncio.sleep(0.1)
    assert len(gate.released) == 1 and not backlogs.lagging


async def test_the_forwarder_reads_the_destinations_lengths_in_its_write_pipeline():
    redis = FakeRedis([PAUSE_ENTRIES + 5])
    forwarder = Forwarder(redis, lambda node: f"s:{node}", "me")
    forwarder.add("a", b"x" * 10, "acme", 0, False)
    forwarder.add("b", b"y" * 10, "acme", 0, False)
    await asyncio.sleep(0.05)
    [pipe] = redis.pipelines  # one round trip: the writes, then the lengths
    assert [(name, args[0]) for name, args, _ in pipe] == [
        ("xadd", "s:a"),
        ("xadd", "s:b"),
        ("xlen", "s:a"),
        ("xlen", "s:b"),
    ]
    assert set(forwarder.lagging) == {"a", "b"}
    forwarder.backlogs.release_all()


def _mixed_entry(topics: list[str], seq: int = 0) -> tuple[bytes, dict]:
    batch = b""
    for offset, topic in enumerate(topics):
        message = Message(topic, b"m", 0, False, tenant="acme", publisher="p")
        batch += codec.encode(message, codec.DELIVER, seq=seq + offset + 1)
    return (f"{seq + 1}-0".encode(), {b"m": batch})


def _stuck_on(broker: Broker, name: str, topic_filter: str) -> Session:
    client = FakeClient(name)  # writes paused: never drains
    session, _ = broker.open_session(client, "acme", name, "d1", True, 0, 1000)
    client.session = session
    broker.subscribe(session, Subscription(topic_filter, 0), None)
    return session


async def test_many_stuck_subscribers_in_turn_hold_the_reader_no_longer_than_one(monkeypatch):
    """From the attacker's side: stuck sessions that back up one after another (each skipped
    once its hold expires) must not chain their holds into a stall of everyone else on the
    node. While messages for others wait, the holds share one allowance, refilled with time."""
    monkeypatch.setattr(ReadGate, "THROTTLE_LIMIT", 5.0)
    monkeypatch.setattr(backpressure, "SHARED_HOLD_LIMIT", 0.2)
    receiver, broker = _receiver()
    for n in range(4):
        _stuck_on(broker, f"stuck{n}", f"t{n}/#")
    other = FakeClient("other")
    other.write_paused = False  # reads everything at once
    session, _ = broker.open_session(other, "acme", "other", "d1", True, 0, 1000)
    other.session = session
    broker.subscribe(session, Subscription("u/#", 0), None)
    # Each stuck session in turn gets more than a queue's worth, with 60 of the other's among
    # its first 60.
    topics = []
    for n in range(4):
        for i in range(120):
            topics += [f"t{n}/a", "u/a"] if i < 60 else [f"t{n}/a"]
    started = time.monotonic()
    await asyncio.wait_for(receiver._deliver(STREAM, [_mixed_entry(topics)]), 5)
    elapsed = time.monotonic() - started
    assert len(other.sent) == 4 * 60
    assert elapsed < 0.35, f"the others waited {elapsed:.2f} s behind {receiver.hold.holds} holds"


async def test_a_subscriber_that_drains_just_in_time_over_and_over_shares_the_same_allowance(
    monkeypatch,
):
    """From the attacker's side: a session that reads a burst just before each hold would expire
    never expires one, and would hold the reader most of the time. Its holds while others wait
    spend the shared allowance: once spent, it is skipped like a stuck one."""
    monkeypatch.setattr(ReadGate, "THROTTLE_LIMIT", 5.0)
    monkeypatch.setattr(backpressure, "SHARED_HOLD_LIMIT", 0.2)
    receiver, broker = _receiver()
    slow, slow_client = _subscriber(broker, 0)
    other = FakeClient("other")
    other.write_paused = False
    session, _ = broker.open_session(other, "acme", "other", "d1", True, 0, 1000)
    other.session = session
    broker.subscribe(session, Subscription("u/#", 0), None)

    async def just_in_time() -> None:
        while True:
            await asyncio.sleep(0.15)
            _drain(slow, slow_client)

    drainer = asyncio.create_task(just_in_time())
    started = time.monotonic()
    try:
        await asyncio.wait_for(receiver._deliver(STREAM, [_mixed_entry(["t/a", "u/a"] * 400)]), 5)
    finally:
        drainer.cancel()
    elapsed = time.monotonic() - started
    assert len(other.sent) == 400
    # Before the shared allowance: 8 holds of 0.15 s, 1.2 s, for 400 messages of others'; with
    # it one hold (~0.2 s). The bound leaves room for a loaded CI machine (0.5 s failed there).
    assert elapsed < 0.9, f"the others waited {elapsed:.2f} s behind {receiver.hold.holds} holds"
    assert receiver.hold.expired == 1 and set(receiver.hold.skipped) == {slow}


async def test_a_takeover_behind_a_fan_in_hold_waits_only_the_short_limit(monkeypatch):
    """A fan-in into one backed-up session may hold the reader a connection's 2 s, since holding
    then costs nobody else; a session takeover waiting behind it (a client's CONNECT on another
    node) is somebody else: the hold is as short as when others' messages wait."""
    monkeypatch.setattr(ReadGate, "THROTTLE_LIMIT", 5.0)
    monkeypatch.setattr(backpressure, "SHARED_HOLD_LIMIT", 0.2)
    receiver, broker = _receiver()
    controls: list[dict] = []
    receiver.sessions = SimpleNamespace(on_control=controls.append)
    _subscriber(broker, 0)  # never drains
    takeover = b'{"op": "takeover", "tenant": "acme", "client_id": "c1", "from": "n2", "id": "r1"}'
    entries = _entries(2, 100, 0)
    entries.insert(1, (b"1-5", {b"c": takeover}))
    started = time.monotonic()
    await asyncio.wait_for(receiver._deliver(STREAM, entries), 3)
    assert time.monotonic() - started < 1.0
    assert [body["op"] for body in controls] == ["takeover"]
    assert receiver.hold.expired == 1

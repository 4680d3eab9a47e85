"""A session that moved away: what other nodes sent its old node before they knew, read there
after the relay left, still reaches it (data_plane.cluster.departed).

A real broker, session, relay, receiver and session claims; the bus is a fake whose clock
answers TIME, and the forwarder a fake that records what it was given for which node.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from redis.exceptions import ConnectionError as RedisConnectionError

from common.mqtt.packets import Subscription
from data_plane.broker.broker import Broker
from data_plane.broker.message import Message
from data_plane.cluster import codec
from data_plane.cluster.bus import Bus as NodeBus
from data_plane.cluster.departed import MARGIN, Departed
from data_plane.cluster.exactly import Origins, mark
from data_plane.cluster.keys import Keys
from data_plane.cluster.receive import Receiver
from data_plane.cluster.relay import RELAY_STEP, Relays
from data_plane.cluster.routes import route_key
from data_plane.cluster.sessions import SessionClaims
from data_plane.config import BrokerConfig
from data_plane.tenancy.static import StaticAuthenticator
from tests.broker.test_ports import FakeClient
from tests.cluster.test_backpressure_units import STREAM, FakeRedis

BUS_SECONDS = 1_000_000  # the fake bus's clock when the relay leaves


class Bus(FakeRedis):
    async def time(self) -> tuple[int, int]:
        return BUS_SECONDS, 0


class Forwarder:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes]] = []

    def add(self, node_id: str, data: bytes, tenant: str, qos: int, wait: bool) -> None:
        self.sent.append((node_id, data))

    def relayed(self) -> list[tuple[str, str, tuple]]:
        """(node, payload, the relay's (client id, origin node) pairs) of each message sent."""
        out = []
        for node_id, data in self.sent:
            for flags, message, groups, _seq in codec.decode_counted(data):
                assert flags & codec.TARGET
                out.append((node_id, message.payload.decode(), groups))
        return out


def _node(arrived: bool = False) -> SimpleNamespace:
    """This node ("a") holding the persistent session acme/s on t/#, and node "b" whose
    routes for it are announced: its session claims, relays, departed relays and stream
    reader, each given what it uses (the bus and the forwarder are fakes). `arrived`: the
    session came here from a live node a moment ago (its move window is open here)."""
    auth = StaticAuthenticator({"acme": {"devices": {"d1": {"password": "p"}}}})
    broker = Broker(BrokerConfig(port=0, ws_port=0, sys_interval=0), auth)
    dropped: dict[str, int] = {}
    redis = Bus()
    bus = NodeBus("a", Keys("test"), redis, redis, 2.0)
    peers = SimpleNamespace(alive={"b": {}, "c": {}}, dying=set())
    table = SimpleNamespace(nodes={"b": SimpleNamespace(routes={route_key("acme", "t/#", None)})})
    forwarder = Forwarder()
    origins = Origins("a")
    origins.attach(broker)
    departed = Departed(redis, origins.second_copy)
    relays = Relays(forwarder, table, peers, departed)  # type: ignore[arg-type]
    drop = lambda reason, n: dropped.__setitem__(reason, n)  # noqa: E731
    sessions = SessionClaims(
        bus, peers=peers, departed=departed, origins=origins, relays=relays, drop=drop
    )
    receiver = Receiver(
        bus, sessions=sessions, departed=departed, drop=drop, handover=lambda *m: None
    )
    for room in (relays, sessions, receiver):
        room.attach(broker)
    client = FakeClient("s")
    if arrived:
        origins.expect(("acme", "s"))
    session, _ = broker.open_session(client, "acme", "s", "d1", False, 3600, 1000)
    broker.subscribe(session, Subscription("t/#", 1), None)
    return SimpleNamespace(
        broker=broker,
        redis=redis,
        table=table,
        forwarder=forwarder,
        departed=departed,
        relays=relays,
        sessions=sessions,
        receiver=receiver,
        dropped=dropped,
        session=session,
        origins=origins,
    )


async def _moved_to_b(cluster: SimpleNamespace, session=None, topic_filter: str = "t/#") -> None:
    """The session (acme/s unless given) leaves this node for "b" (as `SessionClaims.release`
    does), and its relay leaves the router once b's routes are known here."""
    session = session or cluster.session
    cluster.relays.stand_in(session, "b")
    cluster.broker.router.for_tenant("acme").unsubscribe(topic_filter, session, None)
    del cluster.broker.sessions[session.key]
    await asyncio.sleep(RELAY_STEP * 3)
    topic = topic_filter.replace("#", "x")
    assert cluster.broker.router.match("acme", topic) == ([], [])  # the relay left the router


def _batch(topic: str, payload: str, seq: int = 7) -> bytes:
    message = Message(topic, payload.encode(), 1, False, tenant="acme", publisher="p")
    return codec.encode(message, codec.DELIVER, seq=seq)


def _entry(written_ms: int, payload: str, writer: bytes = b"c", seq: int = 7) -> tuple[bytes, dict]:
    return (
        f"{written_ms}-0".encode(),
        {b"m": _batch("t/x", payload, seq), b"w": writer, b"c": seq},
    )


async def test_a_message_sent_before_the_move_and_read_after_the_relay_left_reaches_the_session():
    cluster = _node()
    await _moved_to_b(cluster)
    receiver = cluster.receiver
    cutoff = BUS_SECONDS * 1000 + int(MARGIN * 1000)
    # Node c wrote it to our stream under its old table (before it knew b's route); we read
    # it only now: it goes to b for the session, as the relay would have sent it.
    await receiver._deliver(STREAM, [_entry(cutoff - 500, "late")])
    assert cluster.forwarder.relayed() == [("b", "late", frozenset({("s", "c")}))]
    # Written after every node knew (past the cutoff): nothing of it is the session's here, and
    # the departed relay is gone.
    await receiver._deliver(STREAM, [_entry(cutoff + 1, "after")])
    assert len(cluster.forwarder.sent) == 1 and not cluster.departed.records


async def test_a_relayed_message_for_a_session_that_moved_on_follows_it():
    """a → b → elsewhere: a message a's relay sent to b after the session left b goes on."""
    cluster = _node()
    await _moved_to_b(cluster)  # here, "b" is where the session went from this node
    message = Message("t/x", b"relayed", 1, False, tenant="acme", publisher="p")
    mark(message, "c", 9)  # read from the stream: published at c, relayed by a
    commits: list = []
    cluster.sessions.targeted(message, "s", commits)
    assert cluster.forwarder.relayed() == [("b", "relayed", frozenset({("s", "c")}))]
    assert "session_gone" not in cluster.dropped


async def test_a_session_that_comes_back_is_delivered_to_here_and_not_sent_away():
    cluster = _node()
    await _moved_to_b(cluster)
    cluster.departed.forget(("acme", "s"))  # a CONNECT here claims it again
    message = Message("t/x", b"x", 1, False, tenant="acme", publisher="p")
    cluster.sessions.targeted(message, "s", [])
    await cluster.receiver._deliver(STREAM, [_entry(BUS_SECONDS * 1000, "late")])
    assert cluster.forwarder.sent == [] and cluster.dropped == {"session_gone": 1}


async def test_each_departed_relay_keeps_to_its_own_cutoff_when_an_older_one_has_none_yet():
    """The bus did not answer TIME for the first relay that left (its cutoff unknown: it applies
    to every entry until KEEP); a later one's cutoff still holds for its own session."""
    cluster = _node()
    calls = [0]

    async def time_failing_first() -> tuple[int, int]:
        calls[0] += 1
        if calls[0] == 1:
            raise RedisConnectionError("bus down")
        return BUS_SECONDS, 0

    cluster.redis.time = time_failing_first
    await _moved_to_b(cluster)
    other, _ = cluster.broker.open_session(FakeClient("o"), "acme", "o", "d1", False, 3600, 1000)
    cluster.broker.subscribe(other, Subscription("u/#", 1), None)
    cluster.table.nodes["b"].routes.add(route_key("acme", "u/#", None))  # b announced it
    await _moved_to_b(cluster, other, "u/#")
    after = BUS_SECONDS * 1000 + int(MARGIN * 1000) + 1
    late_t = _entry(after, "t-late")
    late_u = (f"{after + 1}-0".encode(), {**late_t[1], b"m": _batch("u/x", "u-late")})
    await cluster.receiver._deliver(STREAM, [late_t, late_u])
    # The first (no cutoff) still sends; the second's entry was past its cutoff: not sent.
    assert [payload for _node_id, payload, _ in cluster.forwarder.relayed()] == ["t-late"]


def _published_at_c(payload: str, seq: int) -> Message:
    message = Message("t/x", payload.encode(), 1, False, tenant="acme", publisher="p")
    mark(message, "c", seq)
    return message


async def test_a_message_the_session_got_here_does_not_follow_it_when_it_moves_on():
    """z → a → b, a node on the way stalled: node c published m9 while the session was here;
    its direct copy was delivered here, and a second copy (c still routed to the stalled node
    the session had left, whose relay sent it here late) reaches this node after the session
    left for b, as a relayed message and as a late stream entry. Neither goes on to b, where the
    session's window never saw m9 (CI once saw a QoS 2 message twice this way); m10, which the
    session did not get here, still follows it."""
    cluster = _node(arrived=True)
    commits: list = []
    cluster.sessions.targeted(_published_at_c("m9", 9), "s", commits)  # delivered here
    assert [d.message.payload for d in cluster.session.queue] == [b"m9"]  # (a slow reader)
    await _moved_to_b(cluster)
    cluster.sessions.targeted(_published_at_c("m9", 9), "s", commits)  # relayed, late
    await cluster.receiver._deliver(STREAM, [_entry(BUS_SECONDS * 1000, "m9", seq=9)])
    cluster.sessions.targeted(_published_at_c("m10", 10), "s", commits)
    assert [p for _node_id, p, _groups in cluster.forwarder.relayed()] == ["m10"]
    assert cluster.origins.duplicates == 2


async def test_a_session_back_within_its_window_keeps_what_it_got_here_the_first_time():
    """a → b → a: what the session got here on its first stay still counts as delivered."""
    cluster = _node(arrived=True)
    cluster.sessions.targeted(_published_at_c("m9", 9), "s", [])
    await _moved_to_b(cluster)
    cluster.departed.forget(("acme", "s"))  # back here: a CONNECT claims it again
    cluster.origins.expect(("acme", "s"))
    again, _ = cluster.broker.open_session(FakeClient("s"), "acme", "s", "d1", False, 3600, 1000)
    cluster.broker.subscribe(again, Subscription("t/#", 1), None)
    cluster.sessions.targeted(_published_at_c("m9", 9), "s", [])  # a late second copy
    cluster.sessions.targeted(_published_at_c("m10", 10), "s", [])
    assert [d.message.payload for d in again.queue] == [b"m10"]

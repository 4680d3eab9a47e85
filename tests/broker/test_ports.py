"""The broker's results and ports (data_plane.broker.ports), at the unit level: what
`Broker.publish` returns about back-pressure, and what a cluster plugged in as a port is given.

The client is a fake `ports.Client` whose writes are paused, so every QoS 1/2 delivery waits in
the session's queue and the queue's length is exactly the number of messages published.
"""

from __future__ import annotations

from common.mqtt.packets import Subscription
from data_plane.broker.broker import Broker
from data_plane.broker.message import Message
from data_plane.broker.ports import Ports, Published
from data_plane.broker.session import Session
from data_plane.config import BrokerConfig
from data_plane.tenancy.static import StaticAuthenticator

MAX_QUEUED = 10


class FakeClient:
    protocol_version = 4
    client_receive_maximum = 65535
    client_maximum_packet_size = 1 << 20
    closing = False
    write_paused = True  # a slow reader: deliveries queue
    outbound_bucket = None
    batch_full = False
    tenant, device = "acme", "d1"
    auth = None

    def __init__(self, client_id: str) -> None:
        self.client_id = client_id
        self.session = None
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    def pace(self, wait: float) -> None: ...

    def outbound_alias(self, topic: str) -> None:
        return None

    def alias_sent(self, topic: str, alias: int) -> None: ...

    def unthrottle_by(self, session) -> None: ...

    def taken_over(self) -> None: ...


def _broker(ports: Ports | None = None) -> Broker:
    auth = StaticAuthenticator({"acme": {"devices": {"d1": {"password": "p"}}}})
    config = BrokerConfig(port=0, ws_port=0, sys_interval=0)
    return Broker(config, auth) if ports is None else Broker(config, auth, ports)


def _connect(
    broker: Broker,
    client_id: str,
    topic_filter: str,
    qos: int,
    expiry: int = 0,
    max_queued: int = MAX_QUEUED,
):
    client = FakeClient(client_id)
    session, _ = broker.open_session(client, "acme", client_id, "d1", True, expiry, max_queued)
    client.session = session
    broker.subscribe(session, Subscription(topic_filter, qos), None)
    return session


def _message(topic: str, qos: int, publisher: str = "pub") -> Message:
    return Message(topic, b"x", qos, False, tenant="acme", publisher=publisher)


def test_publish_names_the_subscriber_whose_queue_backed_up_past_half():
    broker = _broker()
    slow = _connect(broker, "slow", "t/#", 1)
    results = [broker.publish(_message("t/a", 1)) for _ in range(MAX_QUEUED)]
    # Below half the queue: nobody to slow down; from half on: the slow subscriber, each time.
    assert [r.slow_down for r in results] == [()] * 4 + [(slow,)] * 6
    assert all(r.reached == 1 for r in results)


def test_qos0_slows_a_publisher_down_once_the_backlog_is_half_its_cap():
    # Without it a fan-in of QoS 0 publishers had the loop reading and dropping while the one
    # subscriber got ~1% of the messages.
    broker = _broker()
    slow = _connect(broker, "slow", "t/#", 0, max_queued=1000)
    half = Session.QOS0_QUEUE_LIMIT // 2
    results = [broker.publish(_message("t/a", 0)) for _ in range(half + 2)]
    assert [r.slow_down for r in results] == [()] * (half - 1) + [(slow,)] * 3
    assert slow.queued_qos0 == half + 2 and slow.dropped == 0


def test_qos0_into_a_short_queue_slows_the_publisher_at_half_the_queue():
    broker = _broker()
    slow = _connect(broker, "slow", "t/#", 0)  # a queue of MAX_QUEUED, below the QoS 0 cap
    results = [broker.publish(_message("t/a", 0)) for _ in range(MAX_QUEUED)]
    assert [r.slow_down for r in results] == [()] * 4 + [(slow,)] * 6


def test_an_offline_qos0_subscriber_slows_nobody_down():
    broker = _broker()
    slow = _connect(broker, "slow", "t/#", 0, expiry=60, max_queued=1000)
    slow.queue_qos0_offline = True
    slow.connection = None  # offline (detached, not expired): its queue keeps QoS 0
    limit = Session.QOS0_QUEUE_LIMIT
    assert all(not broker.publish(_message("t/a", 0)).slow_down for _ in range(limit))
    assert slow.queued_qos0 == limit


class HeldPublisher:
    """A publisher's read gate, as the session sees it: released ones publish what they held."""

    def __init__(self, name: str, broker: Broker, held: int, released: list[str]) -> None:
        self.name, self.broker, self.held, self.released = name, broker, held, released

    def unthrottle_by(self, session: Session) -> None:
        self.released.append(self.name)
        for _ in range(self.held):
            result = self.broker.publish(_message("t/a", 0, self.name))
            if result.slow_down:  # held anew, as the read gate would be
                session.hold(self)
                return


def test_held_publishers_go_oldest_first_while_the_queue_has_room():
    broker = _broker()
    slow = _connect(broker, "slow", "t/#", 0, max_queued=1000)
    half = Session.QOS0_QUEUE_LIMIT // 2
    released: list[str] = []
    publishers = [HeldPublisher(f"p{i}", broker, 5, released) for i in range(half + 10)]
    for publisher in publishers:
        slow.hold(publisher)
    slow.release_publishers()  # the queue is empty: room up to the hold mark
    # Each released publisher publishes what it held (5) until the queue reaches the hold mark:
    # the tenth is held anew there, behind those still waiting, in order.
    assert released == [f"p{i}" for i in range(10)]
    assert slow.queued_qos0 == half and slow.dropped == 0
    assert list(slow.blocked_publishers) == publishers[10:] + [publishers[9]]


def test_a_departing_subscriber_releases_every_publisher():
    broker = _broker()
    slow = _connect(broker, "slow", "t/#", 0, max_queued=1000)
    released: list[str] = []
    for _ in range(Session.QOS0_QUEUE_LIMIT):
        broker.publish(_message("t/a", 0))
    for i in range(3):
        slow.hold(HeldPublisher(f"p{i}", broker, 0, released))
    broker.detach(slow, slow.connection)
    assert released == ["p0", "p1", "p2"] and not slow.blocked_publishers


def test_a_stalled_subscriber_no_longer_slows_publishers_down():
    broker = _broker()
    slow = _connect(broker, "slow", "t/#", 1)
    for _ in range(MAX_QUEUED // 2):
        broker.publish(_message("t/a", 1))
    slow.stalled = True  # held a publisher for the whole allowance without draining
    assert broker.publish(_message("t/a", 1)).slow_down == ()


def test_fan_out_names_only_the_subscribers_that_backed_up():
    broker = _broker()
    slow = _connect(broker, "slow", "t/#", 1)
    fast = _connect(broker, "fast", "t/+", 1)
    fast.connection.write_paused = False  # sends at once: its queue stays empty
    for _ in range(MAX_QUEUED // 2 - 1):
        assert broker.publish(_message("t/a", 1)).slow_down == ()
    result = broker.publish(_message("t/a", 1))
    assert result.reached == 2 and result.slow_down == (slow,)


class RecordingCluster:
    """A stand-in for data_plane.cluster: routes each message here through the broker (as the
    real one does, beside forwarding it) and records what it is given."""

    def __init__(self) -> None:
        self.broker: Broker | None = None  # the stand-in's own wiring, as Cluster.start does
        self.published: list[tuple[str, Published]] = []
        self.routes: list[tuple[str, str, str | None, bool]] = []

    def publish(self, message: Message) -> Published:
        local = self.broker.route(message)
        self.published.append((message.topic, local))
        return local._replace(reached=local.reached + 1)  # as if one other node matched

    def members(self) -> list[dict]:
        return [{"node": "here"}]

    def route_changed(self, tenant: str, topic_filter: str, group: str | None, added: bool):
        self.routes.append((tenant, topic_filter, group, added))

    def hand_held(self, message: Message, topic_filter: str, name: str) -> None:
        return None  # no other node has a member of any group

    def take_group(self, tenant: str, topic_filter: str, name: str) -> None:
        return None  # no other node keeps any group

    async def fence(self):
        raise AssertionError("no replay here")

    async def claim(self, tenant: str, client_id: str, clean_start: bool) -> None:
        return None


def test_cluster_port_gets_every_routed_message_with_the_local_result():
    cluster = RecordingCluster()
    broker = cluster.broker = _broker(Ports(cluster=cluster))
    slow = _connect(broker, "slow", "t/#", 1)
    assert cluster.routes == [("acme", "t/#", None, True)]  # the route table follows
    results = [broker.publish(_message(topic, 1)) for topic in ("nobody/here", "t/a")]
    results += [broker.publish(_message("t/a", 1)) for _ in range(MAX_QUEUED // 2 - 1)]
    # Every message, with or without a local subscriber, and the publish's answer is the
    # cluster's (which keeps whom to slow down here).
    assert [topic for topic, _ in cluster.published] == ["nobody/here"] + ["t/a"] * 5
    assert [r.reached for r in results] == [1] + [2] * 5
    assert results[-1].slow_down == (slow,) and cluster.published[-1][1].slow_down == (slow,)

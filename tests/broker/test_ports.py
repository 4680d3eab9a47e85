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

    def unthrottle_by(self, session) -> None: ...

    def taken_over(self) -> None: ...


def _broker(ports: Ports | None = None) -> Broker:
    auth = StaticAuthenticator({"acme": {"devices": {"d1": {"password": "p"}}}})
    config = BrokerConfig(port=0, ws_port=0, sys_interval=0)
    return Broker(config, auth) if ports is None else Broker(config, auth, ports)


def _connect(broker: Broker, client_id: str, topic_filter: str, qos: int):
    client = FakeClient(client_id)
    session, _ = broker.open_session(client, "acme", client_id, "d1", True, 0, MAX_QUEUED)
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


def test_qos0_never_slows_a_publisher_down():
    broker = _broker()
    _connect(broker, "slow", "t/#", 0)
    assert all(not broker.publish(_message("t/a", 0)).slow_down for _ in range(MAX_QUEUED))


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

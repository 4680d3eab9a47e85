"""Exactly once at QoS 2 across nodes (issue 17, points 3 and 5): a session moving between
nodes under QoS 2 traffic gets every message once — the old node's relay and the publisher's
node may both send it to the new node in the move's first milliseconds (data_plane.cluster.
exactly). Real broker processes on the test Postgres and Redis, real MQTT clients (paho),
every message counted by its payload."""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter

import pytest
import redis

from tests.broker.clients import Paho
from tests.cluster.conftest import HEARTBEAT, metric, until_routed

pytestmark = pytest.mark.django_db(transaction=True)


class Publisher:
    """QoS 2 publishing in a thread; `acked`: the payloads whose PUBREC said success."""

    def __init__(self, client: Paho, topic: str, pause: float = 0.008) -> None:
        self.client, self.topic, self.pause = client, topic, pause
        self.acked: list[str] = []
        self.results: dict[int, int] = {}
        client.client.on_publish = lambda c_, u, mid, code, props: self.results.__setitem__(
            mid, code.value
        )
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        i = 0
        while not self.stop.is_set():
            info = self.client.client.publish(self.topic, f"m{i}", qos=2)
            info.wait_for_publish(5)
            if self.results.get(info.mid, 0x80) < 0x80:
                self.acked.append(f"m{i}")
            i += 1
            time.sleep(self.pause)

    def __enter__(self) -> Publisher:
        self.thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self.stop.set()
        self.thread.join(10)


def move(client: Paho, port: int) -> None:
    """The client leaves its node (DISCONNECT, the session stays) and resumes it at `port`."""
    client.client.disconnect()
    client.stop_loop()
    client.port = port
    client.connack.clear()
    client.connect()
    assert client.session_present


def collect(clients: list[Paho], acked: list[str], patience: float = 8.0) -> Counter[str]:
    """Every payload the clients got (one count per delivery), once all `acked` came or the
    patience ran out, and a moment more for late duplicates."""
    got: Counter[str] = Counter()
    deadline = time.monotonic() + patience
    settled = None
    while time.monotonic() < deadline:
        for client in clients:
            got.update(m.payload.decode() for m in client.expect(1000, timeout=0.05))
        if settled is None and set(acked) <= set(got):
            settled = time.monotonic()
        if settled is not None and time.monotonic() - settled > 1.0:
            break
    return got


def test_a_session_moving_under_qos2_traffic_gets_every_message_exactly_once(nodes, tenant_user):
    """QoS 2 at about 100 msg/s from node c while the client moves a → b → a → b → a → c → b
    (one paho client, so its QoS 2 state goes with it as a real device's would): every
    acknowledged message arrives, none twice (counted by payload)."""
    _, (a, b, c) = nodes
    user, secret = tenant_user
    topic = f"x2/{uuid.uuid4().hex[:6]}"
    mover = Paho(a.port, user, secret, "exact", clean=False, expiry=3600)
    mover.subscribe(f"{topic}/#", qos=2)
    publisher = Paho(c.port, user, secret, "x2-pub")
    until_routed(publisher, mover, f"{topic}/probe")
    with Publisher(publisher, f"{topic}/x") as traffic:
        for node in (b, a, b, a, c, b):
            time.sleep(0.6)
            move(mover, node.port)
        time.sleep(0.6)
    acked = traffic.acked
    got = collect([mover], acked)
    assert len(acked) > 200
    missing = [p for p in acked if p not in got]
    twice = sorted((p for p, n in got.items() if n > 1), key=lambda p: int(p[1:]))
    assert not missing, f"{len(missing)} acknowledged messages lost: {missing[:10]}"
    assert not twice, f"{len(twice)} messages delivered twice: {twice[:10]}"
    relayed = sum(metric(n, "mqtt_cluster_relayed_messages_total") for n in (a, b, c))
    assert relayed >= 1  # the relays did work (else this test proves nothing)
    for client in (mover, publisher):
        client.close()


def test_kill_9_at_qos2_delivers_every_message_exactly_once(nodes, tenant_user, redis_url):
    """Two persistent QoS 2 subscribers on node a, QoS 2 traffic from node c; Redis pauses
    writes for a moment (as a slow Redis would) just as node a delivers a message, and node a
    is killed (-9) inside the pause: it had committed deliveries it could not acknowledge on
    the bus yet (without the stream mark they are queued again: the test fails). The survivor adopts the
    sessions and drains a's stream; the clients resume at node b and get every acknowledged
    message exactly once (counted by payload)."""
    _, (a, b, c) = nodes
    user, secret = tenant_user
    topic = f"k2/{uuid.uuid4().hex[:6]}"
    subscribers = []
    for name in ("kept-1", "kept-2"):
        client = Paho(a.port, user, secret, name, clean=False, expiry=3600)
        client.subscribe(f"{topic}/#", qos=2)
        subscribers.append(client)
    publisher = Paho(c.port, user, secret, "k2-pub")
    for client in subscribers:
        until_routed(publisher, client, f"{topic}/probe")
    bus = redis.Redis.from_url(redis_url)
    armed, paused = threading.Event(), threading.Event()

    def pause_at_publish(_client, _userdata, _level, text: str) -> None:
        # A PUBLISH just came from node a: it is committing that delivery now, then it will
        # acknowledge the stream entry (XACK) — which Redis, pausing writes, holds back.
        if armed.is_set() and text.startswith("Received PUBLISH"):
            armed.clear()
            bus.execute_command("CLIENT", "PAUSE", 400, "WRITE")
            paused.set()

    subscribers[0].client.on_log = pause_at_publish
    with Publisher(publisher, f"{topic}/x") as traffic:
        time.sleep(1.0)
        armed.set()
        assert paused.wait(5)
        time.sleep(0.2)
        before_kill = len(traffic.acked)
        a.kill()
        time.sleep(2 * HEARTBEAT + 1.5)  # noticed, adopted, drained; traffic goes on
    for client in subscribers:
        client.stop_loop()  # (its node is gone: no reconnecting there on its own)
        move(client, b.port)
    acked = traffic.acked
    # Traffic on both sides of the kill (a count over the whole run, 150, failed once in CI at
    # 148 on a loaded machine: the rate is the machine's, not what the test is about).
    assert before_kill >= 20 and len(acked) - before_kill >= 20, (before_kill, len(acked))
    for client in subscribers:
        got = collect([client], acked, patience=15)
        missing = [p for p in acked if p not in got]
        twice = sorted((p for p, n in got.items() if n > 1), key=lambda p: int(p[1:]))
        assert not missing, f"{len(missing)} acknowledged messages lost: {missing[:10]}"
        assert not twice, f"{len(twice)} messages delivered twice: {twice[:10]}"
    adopted = sum(
        metric(n, "mqtt_cluster_session_takeovers_total", '{direction="adopted"}') for n in (b, c)
    )
    assert adopted == 2
    for client in (*subscribers, publisher):
        client.close()


def test_kill_9_gives_a_dead_nodes_shared_group_messages_to_a_survivor(nodes, tenant_user):
    """A shared group with a persistent QoS 2 member on node a and one on node b; QoS 2
    traffic from node c, each message to one member. Node a is killed (-9) mid-traffic: what
    was given to node a and not delivered goes to a surviving member (b's, or a's own session
    adopted by the survivor, which its client resumes at b). Every acknowledged message
    reaches the group exactly once (counted by payload over both members)."""
    _, (a, b, c) = nodes
    user, secret = tenant_user
    topic = f"g2/{uuid.uuid4().hex[:6]}"
    members = []
    for node, name in ((a, "member-a"), (b, "member-b")):
        client = Paho(node.port, user, secret, name, clean=False, expiry=3600)
        client.subscribe(f"$share/g/{topic}/#", qos=2)
        members.append(client)
    publisher = Paho(c.port, user, secret, "g2-pub")
    deadline = time.monotonic() + 5
    reached: set[int] = set()
    while len(reached) < 2:  # both members' routes reached node c
        assert time.monotonic() < deadline, "shared group not routed across nodes"
        publisher.publish(f"{topic}/probe", "probe")
        reached |= {i for i, m in enumerate(members) if m.expect(1, timeout=0.1)}
    time.sleep(0.3)
    for member in members:
        member.expect(100, timeout=0.1)  # (the probes)
    with Publisher(publisher, f"{topic}/x") as traffic:
        time.sleep(1.0)
        a.kill()
        time.sleep(2 * HEARTBEAT + 1.5)  # noticed, adopted, drained; traffic goes on
    members[0].stop_loop()
    move(members[0], b.port)
    acked = traffic.acked
    assert len(acked) > 150
    got = collect(members, acked, patience=15)
    missing = [p for p in acked if p not in got]
    twice = sorted((p for p, n in got.items() if n > 1), key=lambda p: int(p[1:]))
    assert not missing, f"{len(missing)} acknowledged messages lost: {missing[:10]}"
    assert not twice, f"{len(twice)} messages delivered twice: {twice[:10]}"
    for client in (*members, publisher):
        client.close()

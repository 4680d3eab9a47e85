"""Sessions across nodes (issue 17, point 3): a persistent session moves with its client, wills
at takeover and at a node's death, nothing acknowledged lost when a node dies mid-forward.
Real broker processes on the test Postgres and Redis, real MQTT clients (paho)."""

from __future__ import annotations

import signal
import threading
import time
import uuid

import pytest
import redis
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.broker.clients import Paho
from tests.cluster.conftest import PgNode, metric, until_routed, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

HEARTBEAT = 1.0


def will(topic: str, payload: str, delay: int) -> tuple:
    props = Properties(PacketTypes.WILLMESSAGE)
    props.WillDelayInterval = delay
    return (topic, payload, 1, False, props)


def route_holders(redis_url: str, cluster: str, key_part: str) -> int:
    """How many nodes' route sets in Redis hold a route containing `key_part`."""
    bus = redis.Redis.from_url(redis_url)
    found = 0
    for key in bus.keys(f"mqtt-cluster:{cluster}:routes:*"):
        if any(key_part.encode() in member for member in bus.smembers(key)):
            found += 1
    return found


def test_a_persistent_session_moves_with_its_client(nodes, tenant_user, redis_url):
    cluster, (a, b, c) = nodes
    user, secret = tenant_user
    topic = f"move/{uuid.uuid4().hex[:6]}"
    first = Paho(a.port, user, secret, "mover", clean=False, expiry=3600)
    first.subscribe(f"{topic}/#", qos=2)
    publisher = Paho(c.port, user, secret, "move-pub")
    until_routed(publisher, first, f"{topic}/probe")
    # Online at node a, it connects at node b: a's connection gets 0x8E, b has the session.
    second = Paho(b.port, user, secret, "mover", clean=False, expiry=3600)
    assert first.disconnected.wait(5) and first.disconnect_reason.value == 0x8E
    first.close()  # (paho would reconnect on its own and take the session back)
    assert second.session_present
    until_routed(publisher, second, f"{topic}/probe")  # its route moved to node b
    wait_for(lambda: route_holders(redis_url, cluster, topic) == 1, 3)  # and left node a
    publisher.publish(f"{topic}/online", "once", qos=1)
    assert [m.payload for m in second.expect(5, timeout=2)] == [b"once"]  # not twice
    # Offline at node b, messages queue for it there; it comes back at node a and finds them.
    second.close()
    for i in range(5):
        publisher.publish(f"{topic}/q1", f"a{i}", qos=1)
        publisher.publish(f"{topic}/q2", f"b{i}", qos=2)
    third = Paho(a.port, user, secret, "mover", clean=False, expiry=3600)
    assert third.session_present
    got = [(m.payload.decode(), m.qos) for m in third.expect(10, 5)]
    # in order within each QoS (paho hands a QoS 2 message over at PUBREL, later)
    assert [p for p, qos in got if qos == 1] == [f"a{i}" for i in range(5)]
    assert [p for p, qos in got if qos == 2] == [f"b{i}" for i in range(5)]
    assert third.nothing(1.0)  # nothing twice (QoS 2 exactly once)
    assert metric(b, "mqtt_cluster_session_takeovers_total", '{direction="released"}') >= 1
    assert metric(a, "mqtt_cluster_session_takeovers_total", '{direction="restored"}') >= 1
    third.close()
    publisher.close()


def test_will_at_takeover_across_nodes_as_mqtt5_says(nodes, tenant_user):
    _, (a, b, c) = nodes
    user, secret = tenant_user
    watcher = Paho(c.port, user, secret, "will-watch")
    watcher.subscribe("wills/#", qos=1)
    # Clean start 1 at the new node: the old session ends, its will goes now (not after 30 s).
    ends = Paho(
        a.port, user, secret, "ends", clean=False, expiry=60, will=will("wills/ends", "x", 30)
    )
    until_routed(Paho(a.port, user, secret, "will-probe"), watcher, "wills/probe")
    ends2 = Paho(b.port, user, secret, "ends", clean=True, expiry=60)
    assert ends.disconnected.wait(5)
    ends.close()
    got = watcher.expect(1, timeout=3)
    assert [(m.topic, m.payload) for m in got] == [("wills/ends", b"x")]
    # Clean start 0 before the will delay ends: the session continues, no will, ever.
    goes_on = Paho(
        a.port, user, secret, "goes-on", clean=False, expiry=60, will=will("wills/on", "y", 2)
    )
    goes_on2 = Paho(b.port, user, secret, "goes-on", clean=False, expiry=60)
    assert goes_on.disconnected.wait(5) and goes_on.disconnect_reason.value == 0x8E
    goes_on.close()
    assert goes_on2.session_present
    assert watcher.nothing(3.5)  # past the 2 s delay
    for client in (ends, ends2, goes_on, goes_on2, watcher):
        client.close()


def test_kill_9_mid_traffic_loses_nothing_acknowledged(nodes, tenant_user):
    """A node holding a persistent QoS 1 subscriber dies (kill -9) while messages flow to it:
    a survivor notices, adopts the session (publishing its will after its delay) and drains
    what was forwarded to the dead node; the client reconnects at another node and receives
    every message its publisher got a PUBACK for."""
    _, (a, b, c) = nodes
    user, secret = tenant_user
    topic = f"flow/{uuid.uuid4().hex[:6]}"
    keeper = Paho(
        a.port, user, secret, "keeper", clean=False, expiry=3600, will=will("gone/k", "lost", 1)
    )
    keeper.subscribe(f"{topic}/#", qos=1)
    watcher = Paho(b.port, user, secret, "gone-watch")
    watcher.subscribe("gone/#", qos=1)
    publisher = Paho(c.port, user, secret, "flow-pub")
    until_routed(publisher, keeper, f"{topic}/probe")
    acked: list[str] = []
    stop = threading.Event()

    def publish_forever() -> None:
        results: dict[int, int] = {}
        publisher.client.on_publish = lambda c_, u, mid, code, props: results.__setitem__(
            mid, code.value
        )
        i = 0
        while not stop.is_set():
            payload = f"m{i}"
            info = publisher.client.publish(f"{topic}/x", payload, qos=1)
            info.wait_for_publish(5)
            if results.get(info.mid, 0x80) < 0x80:  # a PUBACK that says it was taken
                acked.append(payload)
            i += 1
            time.sleep(0.01)

    thread = threading.Thread(target=publish_forever)
    thread.start()
    try:
        time.sleep(1.0)
        a.kill()
        killed = time.monotonic()
        got = watcher.expect(1, timeout=2 * HEARTBEAT + 1 + 3)
        assert [(m.topic, m.payload) for m in got] == [("gone/k", b"lost")]
        took = time.monotonic() - killed
        assert took <= 2 * HEARTBEAT + 1 + 1.5  # noticed, adopted, the 1 s will delay
        time.sleep(1.0)  # traffic goes on to the adopted session
    finally:
        stop.set()
        thread.join(10)
    before = {m.payload.decode() for m in keeper.messages.queue if m.topic.endswith("/x")}
    keeper.stop_loop()  # its node is gone: no reconnecting there
    back = Paho(b.port, user, secret, "keeper", clean=False, expiry=3600)
    assert back.session_present
    wanted = set(acked) - before
    received: set[str] = set()
    deadline = time.monotonic() + 15
    while not wanted <= received and time.monotonic() < deadline:
        received |= {m.payload.decode() for m in back.expect(200, timeout=0.5)}
    assert len(acked) > 100
    missing = sorted(wanted - received, key=lambda p: int(p[1:]))
    assert not missing, f"{len(missing)} acknowledged messages lost: {missing[:10]}"
    adopted = sum(
        metric(n, "mqtt_cluster_session_takeovers_total", '{direction="adopted"}') for n in (b, c)
    )
    assert adopted == 1
    for client in (back, watcher, publisher):
        client.close()


def test_persistent_client_id_racing_at_two_nodes_ends_with_one_session(nodes, tenant_user):
    """The SO_REUSEPORT race with persistent sessions (clean start 0), many times over: two
    CONNECTs of one client id at two nodes at once end with one session, which has the
    subscription and the message queued for it; nothing reaches the client id twice after."""
    _, (a, b, c) = nodes
    user, secret = tenant_user
    publisher = Paho(c.port, user, secret, "race-pub")
    for attempt in range(10):
        client_id, topic = f"prace-{attempt}", f"prace/{attempt}"
        first = Paho(c.port, user, secret, client_id, clean=False, expiry=600)
        first.subscribe(topic, qos=1)
        first.close()
        publisher.publish(topic, "queued", qos=1)  # waits for it at node c, in Postgres
        clients = [
            Paho(node.port, user, secret, client_id, clean=False, expiry=600, connect=False)
            for node in (a, b)
        ]
        threads = [threading.Thread(target=cl.connect, kwargs={"wait": False}) for cl in clients]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        waited = []
        for client in clients:
            assert client.connack.wait(5)
            waited.append(time.monotonic() - started)
        time.sleep(0.3)
        alive = [cl for cl in clients if not cl.disconnected.is_set()]
        reasons = [(cl.session_present, cl.disconnect_reason, waited) for cl in clients]
        assert len(alive) == 1, f"attempt {attempt}: {len(alive)} sessions {reasons}"
        loser = next(cl for cl in clients if cl.disconnected.is_set())
        assert loser.disconnect_reason.value == 0x8E
        loser.close()
        winner = alive[0]
        assert winner.session_present
        # the queued message went to the winner, or to the loser before it lost (it reached
        # the client id: not lost; the winner may get it again, unacknowledged): the loser's
        # is in its queue already, no need to wait for it
        queued = [loser.messages.get().payload for _ in range(loser.messages.qsize())]
        wait = 0.3 if b"queued" in queued else 2
        queued += [m.payload for m in winner.expect(1, timeout=wait)]
        assert b"queued" in queued, f"attempt {attempt}: the queued message was lost"
        publisher.publish(topic, "after", qos=1)
        assert [m.payload for m in winner.expect(1, timeout=2)] == [b"after"], attempt
        assert winner.nothing(0.2), attempt  # once
        winner.close()
    publisher.close()


def test_a_node_stalled_past_its_ttl_is_replaced_and_lets_its_clients_go(redis_url, tenant_user):
    """SIGSTOP longer than the heartbeat TTL: the survivor counts the node dead, adopts its
    persistent session and publishes its will; when the node wakes up it finds itself
    replaced, lets its client go (0x8E) and the client finds its session at the survivor."""
    user, secret = tenant_user
    cluster = f"stall-{uuid.uuid4().hex[:6]}"
    a, b = PgNode(redis_url, cluster, HEARTBEAT), PgNode(redis_url, cluster, HEARTBEAT)
    clients = []
    try:
        wait_for(lambda: metric(b, "mqtt_cluster_nodes") == 2, 10)
        held = Paho(
            a.port, user, secret, "held", clean=False, expiry=600, will=will("st/w", "z", 0)
        )
        held.subscribe("st/data", qos=1)
        watcher = Paho(b.port, user, secret, "st-watch")
        watcher.subscribe("st/w", qos=1)
        clients += [held, watcher]
        until_routed(watcher, held, "st/data")
        a.process.send_signal(signal.SIGSTOP)
        try:
            got = watcher.expect(1, timeout=2 * HEARTBEAT + 3)
            assert [(m.topic, m.payload) for m in got] == [("st/w", b"z")]
            wait_for(
                lambda: (
                    metric(b, "mqtt_cluster_session_takeovers_total", '{direction="adopted"}') == 1
                ),
                3,
            )
            watcher.publish("st/data", "while-stalled", qos=1)  # queued at the survivor
        finally:
            a.process.send_signal(signal.SIGCONT)
        assert held.disconnected.wait(3 * HEARTBEAT) and held.disconnect_reason.value == 0x8E
        held.close()
        back = Paho(b.port, user, secret, "held", clean=False, expiry=600)
        clients.append(back)
        assert back.session_present
        assert [m.payload for m in back.expect(1, timeout=3)] == [b"while-stalled"]
        wait_for(lambda: metric(a, "mqtt_cluster_nodes") == 2, 3 * HEARTBEAT)  # a member again
        assert watcher.nothing(0.5)  # the will went once
    finally:
        for client in clients:
            client.close()
        a.stop()
        b.stop()


def test_a_session_moving_under_traffic_loses_nothing_acknowledged(nodes, tenant_user):
    """QoS 1 traffic flows (about 150 msg/s) while the client moves a → b → a → b → c: each
    old node relays what still reaches it until the new node's routes stand, so every message
    its publisher got a PUBACK for reaches the client."""
    _, (a, b, c) = nodes
    user, secret = tenant_user
    topic = f"mv/{uuid.uuid4().hex[:6]}"
    clients = [Paho(a.port, user, secret, "moving", clean=False, expiry=3600)]
    clients[0].subscribe(f"{topic}/#", qos=1)
    publisher = Paho(c.port, user, secret, "mv-pub")
    until_routed(publisher, clients[0], f"{topic}/probe")
    acked: list[str] = []
    stop = threading.Event()
    results: dict[int, int] = {}
    publisher.client.on_publish = lambda c_, u, mid, code, props: results.__setitem__(
        mid, code.value
    )

    def publish_forever() -> None:
        i = 0
        while not stop.is_set():
            info = publisher.client.publish(f"{topic}/x", f"m{i}", qos=1)
            info.wait_for_publish(5)
            if results.get(info.mid, 0x80) < 0x80:
                acked.append(f"m{i}")
            i += 1
            time.sleep(0.005)

    thread = threading.Thread(target=publish_forever)
    thread.start()
    try:
        for node in (b, a, b, c):
            time.sleep(0.5)
            moved = Paho(node.port, user, secret, "moving", clean=False, expiry=3600)
            assert moved.session_present
            clients[-1].close()  # (taken over: 0x8E; no reconnecting)
            clients.append(moved)
        time.sleep(0.5)
    finally:
        stop.set()
        thread.join(10)
    got: set[str] = set()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and not set(acked) <= got:
        time.sleep(0.1)
        for client in clients:
            got |= {m.payload.decode() for m in client.expect(1000, timeout=0.05)}
    assert len(acked) > 200
    missing = [p for p in acked if p not in got]
    assert not missing, f"{len(missing)} acknowledged messages lost: {missing[:10]}"
    relayed = sum(metric(n, "mqtt_cluster_relayed_messages_total") for n in (a, b, c))
    assert relayed >= 1  # the relays did the work (else this test proves nothing)
    for client in (*clients, publisher):
        client.close()

"""A tenant's limits across three broker processes on one Redis (issue 17, point 4): max
connections exact, publish rates within 5 %, `$SYS` figures summed over the nodes."""

from __future__ import annotations

import json
import signal
import socket
import threading
import time
import uuid

import pytest
import redis

from tests.broker.clients import Paho
from tests.broker.conftest import TENANTS
from tests.cluster.conftest import HEARTBEAT, metric, start_node, until_routed, wait_for
from tests.mqtt_bytes import string, varint

LIMIT = 5
RATE = 200  # msg/s, the tenant's publish rate across the cluster
TENANTS_WITH_LIMITS = {
    **TENANTS,
    "capped": {
        "devices": {f"d{i}": {"password": f"pw{i}", "client_ids": "any"} for i in range(1, 4)},
        "quota": {"max_connections": LIMIT},
    },
    "paced": {
        "devices": {f"d{i}": {"password": f"pw{i}", "client_ids": "any"} for i in range(1, 5)},
        "quota": {"max_publish_rate": RATE},
    },
    "counted": {
        "devices": {f"d{i}": {"password": f"pw{i}", "client_ids": "any"} for i in range(1, 5)},
    },
}


def start_limited_node(tmp, redis_url: str, cluster: str):
    return start_node(tmp, redis_url, cluster, tenants=TENANTS_WITH_LIMITS)


class Nodes(list):
    name: str


@pytest.fixture(scope="module")
def three(tmp_path_factory, redis_url):
    tmp = tmp_path_factory.mktemp("limits")
    name = f"limits-{uuid.uuid4().hex[:6]}"
    nodes = Nodes(start_limited_node(tmp, redis_url, name) for _ in range(3))
    nodes.name = name
    for node in nodes:
        wait_for(lambda n=node: metric(n, "mqtt_cluster_nodes") == 3, 10)
    yield nodes
    for node in nodes:
        node.stop()


class Raw:
    """A client's CONNECT on a plain socket (paho retries a refused CONNECT on its own, and its
    retries would take places): the CONNACK's reason code; the socket holds its place while
    open."""

    def __init__(self, port: int, username: str, password: str, client_id: str) -> None:
        self.sock, self.code = raw_connect(port, username, password, client_id)

    def close(self) -> None:
        self.sock.close()


def connect_at_once(ports: list[int], tenant: str, devices: int, prefix: str = "c") -> list[Raw]:
    """One client per port, all CONNECTs sent together (a thread each)."""
    barrier = threading.Barrier(len(ports))
    clients: list[Raw | None] = [None] * len(ports)

    def go(i: int, port: int) -> None:
        barrier.wait()
        device = f"d{i % devices + 1}"
        clients[i] = Raw(port, f"{tenant}/{device}", f"pw{i % devices + 1}", f"{prefix}{i}")

    threads = [threading.Thread(target=go, args=(i, p)) for i, p in enumerate(ports)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert all(client is not None for client in clients), "no CONNACK"
    return clients


def raw_connect(port: int, username: str, password: str, client_id: str) -> tuple:
    """A 5.0 CONNECT on a plain socket (paho's retries would take places of their own): the
    socket, open while it holds its place, and the CONNACK reason code."""
    body = string("MQTT") + bytes([5, 0xC2]) + (60).to_bytes(2, "big") + b"\x00"
    body += string(client_id) + string(username) + string(password)
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(b"\x10" + varint(len(body)) + body)
    answer = sock.recv(64)
    assert answer[:1] == b"\x20", answer
    return sock, answer[3]


def leave(client: Paho) -> None:
    """DISCONNECT, and the socket closed whatever paho's loop got to write before it stopped
    (else the broker holds the connection, and its place, until the keep-alive runs out)."""
    client.close()
    sock = client.client.socket()
    if sock is not None:
        sock.close()


def test_max_connections_exact_across_nodes(three, redis_url):
    """Limit 5, eight CONNECTs spread over three nodes at once, many times: exactly five in,
    the others refused 0x97 (as one broker answers); the places come back when clients leave."""
    ports = [three[i % 3].port for i in range(8)]
    bus = redis.Redis.from_url(redis_url)
    key = f"mqtt-cluster:{three.name}:conns:capped"
    for attempt in range(10):
        clients = connect_at_once(ports, "capped", 3)
        codes = sorted(c.code for c in clients)
        assert codes == [0] * LIMIT + [0x97] * 3, f"attempt {attempt}: {codes}"
        assert sum(int(n) for n in bus.hvals(key)) == LIMIT  # the nodes' counts in Redis
        for client in clients:
            client.close()
        # Every place comes back as its client leaves: the next round starts from zero.
        wait_for(lambda: not bus.exists(key), 2.0)
    refused = sum(
        metric(node, "mqtt_quota_exceeded_total", '{quota="connections",tenant="capped"}')
        for node in three
    )
    # 3 per round, counted where they were refused (paho retries a refused CONNECT after a
    # second: a round's losers may have knocked again before they were closed)
    assert refused >= 30


def test_a_dead_nodes_connections_free_their_places(tmp_path, redis_url):
    name = f"limits-dead-{uuid.uuid4().hex[:6]}"
    survivor = start_limited_node(tmp_path, redis_url, name)
    doomed = start_limited_node(tmp_path, redis_url, name)
    clients, held = [], []
    try:
        wait_for(lambda: metric(survivor, "mqtt_cluster_nodes") == 2, 10)
        clients = connect_at_once([doomed.port] * 3 + [survivor.port] * 2, "capped", 3)
        assert [c.code for c in clients] == [0] * 5
        late, code = raw_connect(survivor.port, "capped/d1", "pw1", "late")
        late.close()
        assert code == 0x97
        doomed.process.send_signal(signal.SIGKILL)
        doomed.process.wait(5)
        started = time.monotonic()
        while True:  # its three places come back once its marker has expired
            sock, code = raw_connect(survivor.port, "capped/d1", "pw1", "again")
            if code == 0:
                break
            sock.close()
            assert time.monotonic() - started < 3 * HEARTBEAT, "the dead node's places stayed"
            time.sleep(0.05)
        freed = time.monotonic() - started
        assert freed <= 1.5 * HEARTBEAT + 0.5  # its marker's TTL, + a tick and our step
        held.append(sock)
        more = [Raw(survivor.port, "capped/d2", "pw2", f"more-{i}") for i in range(3)]
        clients += more
        assert [c.code for c in more] == [0, 0, 0x97]  # 2 live + 3 = the limit
    finally:
        for client in clients:
            client.close()
        for sock in held:
            sock.close()
        survivor.stop()
        doomed.stop()


def test_publish_rate_across_three_nodes_within_5_percent(three):
    """A publisher on each node, together 2.5 times the tenant's rate, for 7 s (MQTT 3.1.1: over
    the rate the broker stops reading, so nothing is refused, only slowed): the subscriber gets
    the tenant's rate, within 5 %, once the first second's burst is spent."""
    topic = f"rate/{uuid.uuid4().hex[:6]}"
    arrivals: list[float] = []
    sub = Paho(three[0].port, "paced/d4", "pw4", "rate-sub")
    sub.subscribe(f"{topic}/#", qos=0)
    probe = Paho(three[1].port, "paced/d1", "pw1", "rate-probe")
    until_routed(probe, sub, f"{topic}/probe")
    until_routed(Paho(three[2].port, "paced/d2", "pw2", "rate-probe-c"), sub, f"{topic}/probe")
    probe.close()
    time.sleep(1.5)  # the probes' tokens refill: the run starts from a full burst
    sub.client.on_message = lambda client, userdata, message: arrivals.append(time.monotonic())
    seconds, each = 7.0, RATE * 2.5 / 3
    stop = threading.Event()
    publishers = [
        Paho(node.port, f"paced/d{i + 1}", f"pw{i + 1}", f"rate-pub-{i}", v5=False)
        for i, node in enumerate(three)
    ]

    def blast(client: Paho, index: int) -> None:
        sent, started = 0, time.monotonic()
        while not stop.is_set():
            client.client.publish(f"{topic}/{index}", b"x" * 20, 0)
            sent += 1
            delay = started + sent / each - time.monotonic()
            if delay > 0:
                time.sleep(delay)

    threads = [threading.Thread(target=blast, args=(p, i)) for i, p in enumerate(publishers)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    time.sleep(seconds)
    stop.set()
    for thread in threads:
        thread.join()
    time.sleep(0.5)
    window = (began + 2.0, began + seconds - 0.5)  # after the burst, before the end
    inside = [t for t in arrivals if window[0] <= t < window[1]]
    measured = len(inside) / (window[1] - window[0])
    print(f"cluster-wide publish rate {measured:.1f} msg/s, limit {RATE}")
    assert abs(measured - RATE) <= 0.05 * RATE, f"{measured:.1f} msg/s against a limit of {RATE}"
    # Every node slowed its publisher (none had the whole budget to itself), refusing nothing.
    labels = '{quota="publish_rate",tenant="paced"}'
    for node in three:
        assert metric(node, "mqtt_quota_throttled_total", labels)
        assert not metric(node, "mqtt_quota_exceeded_total", labels)
    for client in (*publishers, sub):
        client.close()


def sys_value(client: Paho, name: str, want, timeout: float = 5.0):
    """The latest value of a retained `$SYS` figure until it equals `want` (or the timeout)."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        for message in client.expect(50, timeout=0.3):
            if message.topic == f"$SYS/broker/{name}":
                value = message.payload.decode()
        if value == str(want):
            return value
    return value


def test_sys_figures_are_cluster_wide_and_each_message_counted_once(three):
    a, b, c = three
    watcher = Paho(c.port, "counted/d4", "pw4", "sys-watch")
    clients = [
        Paho(a.port, "counted/d1", "pw1", "sys-a1"),
        Paho(a.port, "counted/d1", "pw1", "sys-a2"),
        Paho(b.port, "counted/d2", "pw2", "sys-b"),
    ]
    watcher.subscribe("$SYS/broker/#")
    # Four clients of the tenant on three nodes (the watcher at c is one of them).
    assert sys_value(watcher, "clients/connected", 4) == "4"
    online = None
    for message in watcher.expect(50, timeout=1.5):
        if message.topic == "$SYS/broker/clients/online":
            online = json.loads(message.payload)
    assert online is not None and set(online["devices"]) == {"d1", "d2", "d4"}
    # Ten messages published at b, delivered at a: received once, sent once, cluster-wide.
    topic = "metered/once"
    clients[0].subscribe(topic, qos=1)
    until_routed(clients[2], clients[0], topic)
    time.sleep(1.5)
    before_received = int(sys_value(watcher, "messages/received", -1, timeout=1.2))
    before_sent = int(sys_value(watcher, "messages/sent", -1, timeout=1.2))
    for i in range(10):
        clients[2].publish(topic, f"m{i}", qos=1)
    assert len(clients[0].expect(10, timeout=5)) == 10
    assert sys_value(watcher, "messages/received", before_received + 10) == str(
        before_received + 10
    )
    assert sys_value(watcher, "messages/sent", before_sent + 10) == str(before_sent + 10)
    clients[1].close()
    assert sys_value(watcher, "clients/connected", 3) == "3"
    for client in (*clients, watcher):
        client.close()


def test_connection_counts_are_written_again_after_a_redis_restart(tmp_path, private_redis):
    """Redis restarted empty: each node writes its own count again (its marker was gone), and
    the limit holds as before — three places taken, two left."""
    name = f"limits-restart-{uuid.uuid4().hex[:6]}"
    a = start_limited_node(tmp_path, private_redis.url, name)
    b = start_limited_node(tmp_path, private_redis.url, name)
    clients: list[Raw] = []
    try:
        wait_for(lambda: metric(a, "mqtt_cluster_nodes") == 2, 10)
        clients = connect_at_once([a.port, a.port, b.port], "capped", 3)
        assert [c.code for c in clients] == [0, 0, 0]
        private_redis.stop()
        private_redis.start()
        bus = redis.Redis.from_url(private_redis.url)
        key = f"mqtt-cluster:{name}:conns:capped"
        wait_for(lambda: sum(int(n) for n in bus.hvals(key)) == 3, 5)
        for node in (a, b):
            wait_for(lambda n=node: metric(n, "mqtt_cluster_bus_up") == 1, 5)
        assert metric(a, "mqtt_cluster_connection_places") == 2
        more = connect_at_once([a.port, b.port, a.port], "capped", 3, prefix="more-")
        clients += more
        assert sorted(c.code for c in more) == [0, 0, 0x97]
    finally:
        for client in clients:
            client.close()
        a.stop()
        b.stop()


def test_without_redis_each_node_keeps_its_share_of_the_rate(tmp_path, private_redis):
    """Redis gone: the leases cannot be topped up, so each of the two nodes refills its own at
    half the tenant's rate — together never more than the rate."""
    name = f"limits-norate-{uuid.uuid4().hex[:6]}"
    a = start_limited_node(tmp_path, private_redis.url, name)
    b = start_limited_node(tmp_path, private_redis.url, name)
    clients: list[Paho] = []
    try:
        wait_for(lambda: metric(a, "mqtt_cluster_nodes") == 2, 10)
        sub = Paho(a.port, "paced/d4", "pw4", "norate-sub")
        sub.subscribe("norate/#", qos=0)
        publisher = Paho(a.port, "paced/d1", "pw1", "norate-pub", v5=False)
        clients = [sub, publisher]
        private_redis.stop()
        wait_for(lambda: metric(a, "mqtt_cluster_rate_local_refills_total") > 0, 5)
        arrivals: list[float] = []
        sub.client.on_message = lambda client, userdata, message: arrivals.append(time.monotonic())
        seconds, began = 4.0, time.monotonic()
        sent = 0
        while time.monotonic() - began < seconds:  # twice the whole rate, from one node
            publisher.client.publish("norate/x", b"x" * 20, 0)
            sent += 1
            time.sleep(max(0.0, began + sent / (2 * RATE) - time.monotonic()))
        time.sleep(0.3)
        inside = [t for t in arrivals if began + 1.5 <= t < began + seconds - 0.2]
        measured = len(inside) / (seconds - 1.7)
        assert abs(measured - RATE / 2) <= 0.1 * RATE / 2, measured
    finally:
        for client in clients:
            leave(client)
        a.stop()
        b.stop()

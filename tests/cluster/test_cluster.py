"""Several broker processes on one Redis act as one broker: membership, routes, forwarding."""

from __future__ import annotations

import json
import queue
import signal
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

from tests.broker.clients import Paho, race_for_one_client_id
from tests.cluster.conftest import HEARTBEAT, metric, start_node, until_routed, wait_for


@pytest.fixture(scope="module")
def three(tmp_path_factory, redis_url):
    tmp = tmp_path_factory.mktemp("cluster")
    name = f"three-{uuid.uuid4().hex[:6]}"
    nodes = [start_node(tmp, redis_url, name) for _ in range(3)]
    for node in nodes:  # everybody sees everybody
        wait_for(lambda n=node: metric(n, "mqtt_cluster_nodes") == 3, 10)
    yield nodes
    for node in nodes:
        node.stop()


def remote_routes(node) -> float:
    return metric(node, "mqtt_cluster_remote_routes")


@dataclass
class Pair:
    """Two nodes, a subscriber on `a` and a publisher on `b`; `clients` are closed at the end."""

    a: Any
    b: Any
    sub: Paho
    publisher: Paho
    clients: list[Paho] = field(default_factory=list)


@contextmanager
def routed_pair(tmp_path, url: str, name: str, heartbeat: float = HEARTBEAT) -> Iterator[Pair]:
    """Two nodes of cluster `name`; a subscriber to `{name}/#` on the first, a publisher on the
    second, once the subscriber's route reached the publisher's node (`until_routed`). Both nodes
    stop, and every client in `Pair.clients` closes, when the block ends."""
    a = start_node(tmp_path, url, name, heartbeat=heartbeat)
    b = start_node(tmp_path, url, name, heartbeat=heartbeat)
    clients: list[Paho] = []
    try:
        wait_for(lambda: metric(b, "mqtt_cluster_nodes") == 2, 10)
        sub = Paho(a.port, "acme/d1", "pw1", f"{name}-sub")
        sub.subscribe(f"{name}/#", qos=1)
        publisher = Paho(b.port, "acme/d2", "pw2", f"{name}-pub")
        clients += [sub, publisher]
        until_routed(publisher, sub, f"{name}/probe")
        yield Pair(a, b, sub, publisher, clients)
    finally:
        for client in clients:
            client.close()
        a.stop()
        b.stop()


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_subscriber_on_one_node_gets_what_another_node_publishes(three, qos):
    a, b, c = three
    topic = f"cross/{qos}/{uuid.uuid4().hex[:6]}"
    sub = Paho(a.port, "acme/d1", "pw1", f"sub-{qos}")
    sub.subscribe(topic, qos=2)
    publisher = Paho(b.port, "acme/d2", "pw2", f"pub-{qos}")
    until_routed(publisher, sub, topic)
    for i in range(20):
        publisher.publish(topic, f"m{i}", qos=qos)
    got = sub.expect(20, timeout=10)
    assert [m.payload.decode() for m in got] == [f"m{i}" for i in range(20)]
    assert {m.qos for m in got} == {qos}
    assert sub.nothing(0.5)  # each exactly once
    sub.close()
    publisher.close()


def test_forwarded_once_per_node_never_per_subscriber(three):
    a, b, c = three
    topic = f"fan/{uuid.uuid4().hex[:6]}"
    subs = [Paho(a.port, "acme/d3", "pw3", f"fan-a{i}") for i in range(3)]
    subs += [Paho(c.port, "acme/d3", "pw3", f"fan-c{i}") for i in range(2)]
    for sub in subs:
        sub.subscribe(topic, qos=1)
    publisher = Paho(b.port, "acme/d4", "pw4", "fan-pub")
    for sub in (subs[2], subs[4]):
        until_routed(publisher, sub, topic)
    for sub in subs:
        while sub.expect(1, timeout=0.05):
            pass
    before = metric(b, "mqtt_cluster_forwarded_messages_total")
    batches_before = metric(b, "mqtt_cluster_forward_batches_total")
    for i in range(50):
        publisher.publish(topic, str(i), qos=1)
    for sub in subs:
        assert len(sub.expect(50, timeout=10)) == 50
    forwarded = metric(b, "mqtt_cluster_forwarded_messages_total") - before
    assert forwarded == 100  # 50 messages × 2 nodes, not × 5 subscribers
    # Batched: QoS 1 publishes wait for their PUBACK one by one here, yet never more entries
    # than messages; the receiving nodes counted what they got.
    assert metric(b, "mqtt_cluster_forward_batches_total") - batches_before <= forwarded
    assert metric(a, "mqtt_cluster_received_messages_total") >= 50
    for sub in subs:
        sub.close()
    publisher.close()


def test_no_route_no_forward_and_tenants_apart(three):
    a, b, _ = three
    spy = Paho(a.port, "other/d1", "other-pw", "spy")  # another tenant, everything it may see
    spy.subscribe("#", qos=1)
    wait_for(lambda: remote_routes(b) >= 1, 5)
    before = metric(b, "mqtt_cluster_forwarded_messages_total")
    publisher = Paho(b.port, "acme/d5", "pw5", "apart-pub")
    publisher.publish(f"apart/{uuid.uuid4().hex[:6]}", "secret", qos=1)
    assert spy.nothing(1.0)
    # acme's topic matches no acme route anywhere: nothing crossed the bus
    assert metric(b, "mqtt_cluster_forwarded_messages_total") == before
    spy.close()
    publisher.close()


def test_shared_group_gets_each_message_once_across_the_cluster(three):
    a, b, c = three
    topic = f"work/{uuid.uuid4().hex[:6]}"
    members = [Paho(a.port, "acme/d1", "pw1", f"grp-a{i}") for i in range(2)]
    members.append(Paho(c.port, "acme/d2", "pw2", "grp-c"))
    for member in members:
        member.subscribe(f"$share/workers/{topic}", qos=1)
    watcher = Paho(c.port, "acme/d3", "pw3", "grp-watch")  # a plain subscriber sees all
    watcher.subscribe(topic, qos=1)
    publisher = Paho(b.port, "acme/d4", "pw4", "grp-pub")
    until_routed(publisher, watcher, topic)
    time.sleep(0.3)  # the group's routes too (same batch of route changes as the watcher's)
    for member in members:
        while member.expect(1, timeout=0.05):
            pass
    for i in range(60):
        publisher.publish(topic, str(i), qos=1)
    assert len(watcher.expect(60, timeout=10)) == 60
    time.sleep(0.5)
    got = [[m.payload.decode() for m in member.expect(60, timeout=0.3)] for member in members]
    everything = [p for payloads in got for p in payloads]
    assert sorted(everything, key=int) == [str(i) for i in range(60)]  # once each, none lost
    assert got[0] + got[1] and got[2]  # both nodes' members took turns
    for client in (*members, watcher, publisher):
        client.close()


def test_retained_on_one_node_is_seen_from_another(three):
    a, b, c = three
    topic = f"kept/{uuid.uuid4().hex[:6]}"
    publisher = Paho(b.port, "acme/d6", "pw6", "kept-pub")
    publisher.publish(topic, "last value", qos=1, retain=True)
    time.sleep(0.3)
    sub = Paho(c.port, "acme/d7", "pw7", "kept-sub")
    sub.subscribe(topic, qos=1)
    got = sub.expect(1, timeout=5)
    assert [(m.payload, m.retain) for m in got] == [(b"last value", True)]
    publisher.close()
    sub.close()


def test_sys_nodes_and_metrics_show_members(three):
    a, b, c = three
    watcher = Paho(a.port, "acme/d8", "pw8", "sys-watch")
    watcher.subscribe("$SYS/broker/nodes")
    got = watcher.expect(1, timeout=5)
    nodes = json.loads(got[0].payload)
    assert len(nodes) == 3
    for node in three:
        assert metric(node, "mqtt_cluster_nodes") == 3
        assert metric(node, "mqtt_cluster_bus_up") == 1
    watcher.close()


def test_dead_node_noticed_within_two_heartbeats_and_its_routes_leave(tmp_path, redis_url):
    name = f"dead-{uuid.uuid4().hex[:6]}"
    survivor = start_node(tmp_path, redis_url, name)
    doomed = start_node(tmp_path, redis_url, name)
    try:
        wait_for(lambda: metric(survivor, "mqtt_cluster_nodes") == 2, 10)
        sub = Paho(doomed.port, "acme/d1", "pw1", "doomed-sub")
        sub.subscribe("dead/#", qos=1)
        wait_for(lambda: remote_routes(survivor) == 1, 5)
        bus = redis.Redis.from_url(redis_url)
        # the doomed node's route set (the survivor has none: an empty set is no key)
        assert len(bus.keys(f"mqtt-cluster:{name}:routes:*")) == 1
        assert len(bus.keys(f"mqtt-cluster:{name}:version:*")) == 2
        doomed.process.send_signal(signal.SIGKILL)
        doomed.process.wait(5)
        noticed = wait_for(lambda: metric(survivor, "mqtt_cluster_nodes") == 1, 4 * HEARTBEAT)
        assert noticed <= 2 * HEARTBEAT + 0.3  # + the scrape loop's own step
        # its routes leave once the survivor took its place (adopted sessions, drained stream)
        wait_for(lambda: remote_routes(survivor) == 0, 1)
        wait_for(lambda: not bus.keys(f"mqtt-cluster:{name}:routes:*"), 2)  # purged
        assert len(bus.keys(f"mqtt-cluster:{name}:version:*")) == 1
        assert bus.scard(f"mqtt-cluster:{name}:members") == 1
    finally:
        survivor.stop()
        doomed.stop()


def test_routes_rebuilt_after_redis_restart(tmp_path, private_redis):
    with routed_pair(tmp_path, private_redis.url, "restart") as pair:
        b, sub, publisher = pair.b, pair.sub, pair.publisher
        private_redis.stop()  # every key gone: routes, members, streams
        wait_for(lambda: metric(b, "mqtt_cluster_bus_up") == 0, 4 * HEARTBEAT)
        # Meanwhile a QoS 1 message for the other node is refused to its publisher, not
        # acknowledged then lost, and counted as dropped with its reason.
        acks = queue.Queue()
        publisher.client.on_publish = lambda client, data, mid, code, props: acks.put(code)
        publisher.client.publish("restart/x", "during", qos=1)
        assert acks.get(timeout=5).value == 0x80
        assert metric(b, "mqtt_cluster_forward_dropped_total", '{reason="bus_unavailable"}') >= 1
        # Cut off for longer than the others wait before counting it dead: no new clients.
        time.sleep(1.5 * HEARTBEAT)
        late = Paho(b.port, "acme/d3", "pw3", "late", connect=False)
        late.connect(wait=False)
        assert late.connack.wait(5) and late.reason_code.value == 0x88
        late.close()
        assert metric(b, "mqtt_cluster_refused_connections_total") >= 1
        private_redis.start()
        converged = wait_for(
            lambda: metric(b, "mqtt_cluster_nodes") == 2 and remote_routes(b) == 1,
            10,
        )
        assert converged <= 3 * HEARTBEAT + 2  # the documented bound: a beat after reconnecting
        publisher.publish("restart/x", "after", qos=1)
        assert [m.payload for m in sub.expect(1, timeout=5)] == [b"after"]  # never "during"
        again = Paho(b.port, "acme/d3", "pw3", "again")  # accepting clients again
        again.close()


def test_after_a_redis_restart_the_first_node_back_does_not_count_the_other_dead(
    tmp_path, private_redis
):
    """Redis restarts and loses every heartbeat; node b is back on the bus first, node a a moment
    later (paused meanwhile, less than a heartbeat TTL). a lost its heartbeat with Redis, not its
    life: b must not take its place, and a's clients stay connected."""
    with routed_pair(tmp_path, private_redis.url, "back") as pair:
        a, b, sub, publisher = pair.a, pair.b, pair.sub, pair.publisher
        private_redis.stop()
        wait_for(lambda: metric(b, "mqtt_cluster_bus_up") == 0, 4 * HEARTBEAT)
        a.process.send_signal(signal.SIGSTOP)
        try:
            private_redis.start()
            wait_for(lambda: metric(b, "mqtt_cluster_bus_up") == 1, 4 * HEARTBEAT)
            time.sleep(0.6 * HEARTBEAT)  # b beats again, and finds no key of a's
        finally:
            a.process.send_signal(signal.SIGCONT)
        wait_for(lambda: metric(b, "mqtt_cluster_nodes") == 2 and remote_routes(b) == 1, 10)
        assert not sub.disconnected.is_set()  # not told 0x8E by a "counted dead" a
        publisher.publish("back/x", "after", qos=1)
        assert [m.payload for m in sub.expect(1, timeout=5)] == [b"after"]


def test_one_client_id_at_two_nodes_ends_with_one_session(three):
    """Takeover across nodes (0x8E at the old node), and the SO_REUSEPORT race: two CONNECTs
    of one client id at two nodes at once, many times over; one session remains each time."""
    a, b, _ = three
    first = Paho(a.port, "acme/d1", "pw1", "roamer")
    first.subscribe("roam/#", qos=1)
    second = Paho(b.port, "acme/d1", "pw1", "roamer")
    assert first.disconnected.wait(5) and first.disconnect_reason.value == 0x8E
    second.close()
    first.close()
    for attempt in range(12):  # each attempt a fresh race
        client_id = f"race-{attempt}"
        clients = [Paho(node.port, "acme/d2", "pw2", client_id, connect=False) for node in (a, b)]
        race_for_one_client_id(clients, attempt)
        for client in clients:
            client.close()
    assert metric(a, "mqtt_cluster_session_takeovers_total", '{direction="released"}') >= 1


def test_slow_node_cut_off_by_the_output_buffer_limit_recovers(tmp_path, private_redis):
    """Redis drops a pub/sub client whose output buffer passes its limit: a node that stalls
    (SIGSTOP, shorter than its heartbeat TTL) while route traffic flows loses its route channel,
    then subscribes again, reloads the others' routes, announces its own anew and serves
    traffic; what was forwarded to it meanwhile waited in its stream (nothing dropped)."""
    bus = redis.Redis.from_url(private_redis.url)
    bus.config_set("client-output-buffer-limit", "pubsub 1mb 512kb 1")
    name = "slow"
    with routed_pair(tmp_path, private_redis.url, name, heartbeat=3.0) as pair:
        a, b, sub, publisher = pair.a, pair.b, pair.sub, pair.publisher
        a_id = next(
            m.decode()
            for m in bus.smembers(f"mqtt-cluster:{name}:members")
            if json.loads(bus.get(f"mqtt-cluster:{name}:node:{m.decode()}"))["pid"] == a.process.pid
        )
        version = int(bus.get(f"mqtt-cluster:{name}:version:{a_id}"))
        assert len(bus.client_list(_type="pubsub")) == 2  # each node's route channel
        a.process.send_signal(signal.SIGSTOP)
        try:
            for i in range(3):  # acknowledged: they wait in node a's stream
                publisher.publish("slow/x", f"held{i}", qos=1)
            # Route traffic it cannot read (deltas it would ignore: its own id, an old version)
            pad = json.dumps({"node": a_id, "version": 0, "pad": "x" * (1 << 20)})
            for _ in range(16):
                bus.publish(f"mqtt-cluster:{name}:routes", pad)
            # Redis closed node a's subscriber connection (its output buffer passed 1 MB)
            wait_for(lambda: len(bus.client_list(_type="pubsub")) == 1, 2)
        finally:
            a.process.send_signal(signal.SIGCONT)
        wait_for(lambda: metric(a, "mqtt_cluster_route_channel_resubscribed_total") >= 1, 5)
        wait_for(lambda: int(bus.get(f"mqtt-cluster:{name}:version:{a_id}")) > version, 5)
        assert metric(b, "mqtt_cluster_nodes") == 2  # never counted dead
        got = [m.payload for m in sub.expect(3, timeout=5)]
        assert got == [b"held0", b"held1", b"held2"]  # each once, in order
        assert sub.nothing(0.5)
        # serving again, both ways: a new route of node a reaches node b, and back
        later = Paho(a.port, "acme/d3", "pw3", "slow-later")
        later.subscribe("after/#", qos=1)
        pair.clients.append(later)
        until_routed(publisher, later, "after/probe")
        watcher = Paho(b.port, "acme/d4", "pw4", "slow-watch")
        watcher.subscribe("back/#", qos=1)
        pair.clients.append(watcher)
        until_routed(later, watcher, "back/probe")
        assert metric(a, "mqtt_cluster_forward_dropped_total", '{reason="bus_unavailable"}') == 0


def test_wills_of_a_killed_nodes_clients_are_published_by_a_survivor(tmp_path, redis_url):
    """Clients of a node that dies (kill -9) lose their connection with it: a survivor publishes
    their wills (clean sessions: the session ended with the node, so at once), never the will
    of a client that had left cleanly before."""
    name = f"wills-{uuid.uuid4().hex[:6]}"
    survivor = start_node(tmp_path, redis_url, name)
    doomed = start_node(tmp_path, redis_url, name)
    clients = []
    try:
        wait_for(lambda: metric(survivor, "mqtt_cluster_nodes") == 2, 10)
        watcher = Paho(survivor.port, "acme/d1", "pw1", "will-watch")
        watcher.subscribe("lwt/#", qos=1)
        clients.append(watcher)
        sensor = Paho(doomed.port, "acme/d2", "pw2", "sensor", will=("lwt/sensor", "off", 1))
        polite = Paho(doomed.port, "acme/d2", "pw2", "polite", will=("lwt/polite", "off", 1))
        probe = Paho(doomed.port, "acme/d3", "pw3", "lwt-probe")
        clients += [sensor, polite, probe]
        until_routed(probe, watcher, "lwt/probe")
        polite.close()  # DISCONNECT 0x00: its will is discarded, here and at the survivor
        time.sleep(0.2)  # (its will record leaves Redis within a few ms)
        doomed.process.send_signal(signal.SIGKILL)
        doomed.process.wait(5)
        for client in (sensor, probe):
            client.stop_loop()  # no reconnecting to a dead port
        got = watcher.expect(1, timeout=2 * HEARTBEAT + 2)
        assert [(m.topic, m.payload) for m in got] == [("lwt/sensor", b"off")]
        assert watcher.nothing(1.0)  # once, and nothing from "polite"
        assert metric(survivor, "mqtt_cluster_dead_node_wills_total") == 1
    finally:
        for client in clients:
            client.close()
        survivor.stop()
        doomed.stop()


def test_forwarded_messages_lost_in_the_stream_are_counted(tmp_path, private_redis):
    """Entries of a node's stream that go before it reads them (the stream's cap trims them
    while it stalls; here the test trims them as the cap would) are counted as dropped with
    their reason, and the node goes on with what follows."""
    bus = redis.Redis.from_url(private_redis.url)
    name = "gap"
    with routed_pair(tmp_path, private_redis.url, name, heartbeat=3.0) as pair:
        a, sub, publisher = pair.a, pair.sub, pair.publisher
        [stream] = [k for k in bus.keys(f"mqtt-cluster:{name}:stream:*") if bus.xlen(k)]
        a.process.send_signal(signal.SIGSTOP)
        try:
            for i in range(6):
                publisher.publish("gap/x", f"gone{i}", qos=1)
            bus.xtrim(stream, maxlen=0)  # what STREAM_MAXLEN does to a reader that far behind
        finally:
            a.process.send_signal(signal.SIGCONT)
        publisher.publish("gap/x", "after", qos=1)
        got = [m.payload for m in sub.expect(7, timeout=3)]
        assert got[-1:] == [b"after"]
        # The read node a had waiting in Redis when it stopped may have taken the first one;
        # every other one is counted, none silently gone.
        early = len(got) - 1
        assert got[:-1] == [b"gone0"][:early]
        label = '{reason="stream_gap"}'
        wait_for(lambda: metric(a, "mqtt_cluster_forward_dropped_total", label) == 6 - early, 3)

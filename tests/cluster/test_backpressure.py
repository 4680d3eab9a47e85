"""Back-pressure across nodes, over real sockets: two broker processes on one Redis, the
subscriber on one node and its publishers on the other (every message crosses the bus), paho
clients. A subscriber that reads slowly slows the publishers on the other node down instead of
losing their QoS 0 messages; one that never reads holds them only briefly (the stream reader's
allowance, 0.1 s, and a connection's at most, 2 s), then its messages drop, counted.

The subscriber's socket receive buffer is made small so that its backlog shows in the broker's
session queue (on loopback the kernel would otherwise buffer megabytes of it).
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from data_plane.broker.flow import ReadGate
from tests.broker.clients import Paho
from tests.cluster.conftest import metric, start_node, until_routed, wait_for

PAYLOAD = b"x" * 1024


def _two_nodes(tmp_path, redis_url: str):
    name = f"bp-{uuid.uuid4().hex[:6]}"
    a = start_node(tmp_path, redis_url, name)  # the subscriber's
    b = start_node(tmp_path, redis_url, name)  # the publishers'
    wait_for(lambda: metric(b, "mqtt_cluster_nodes") == 2, 10)
    return a, b


def _subscriber(port: int, topic: str, client_id: str) -> Paho:
    sub = Paho(port, "acme/d1", "pw1", client_id)
    sub.subscribe(topic, qos=0)
    sub.client.socket().setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
    return sub


def _until_quiet(received: list[int], total: int, quiet: float = 3.0) -> float:
    """When the last message arrived: all `total`, or none more for `quiet` seconds."""
    last, seen = time.monotonic(), received[0]
    while received[0] < total and time.monotonic() - last < quiet:
        time.sleep(0.05)
        if received[0] != seen:
            last, seen = time.monotonic(), received[0]
    return last if received[0] < total else time.monotonic()


def test_a_fan_in_across_nodes_into_a_slow_reader_loses_nothing_and_slows_the_publishers(
    tmp_path, redis_url
):
    a, b = _two_nodes(tmp_path, redis_url)
    clients: list[Paho] = []
    try:
        sub = _subscriber(a.port, "fanin/#", "bp-slow")
        clients.append(sub)
        publishers = [Paho(b.port, "acme/d2", "pw2", f"bp-pub-{i}") for i in range(5)]
        clients += publishers
        until_routed(publishers[0], sub, "fanin/probe")
        received = [0]

        def slow_reader(client, userdata, message) -> None:  # ~4,000 msg/s at most
            received[0] += 1
            if received[0] % 20 == 0:
                time.sleep(0.005)

        sub.client.on_message = slow_reader
        each = 3000

        def flat_out(publisher: Paho) -> None:  # QoS 0, as fast as paho takes them
            for _ in range(each):
                publisher.client.publish("fanin/x", PAYLOAD, 0)

        started = time.monotonic()
        with ThreadPoolExecutor(len(publishers)) as pool:
            list(pool.map(flat_out, publishers))
        total = each * len(publishers)
        took = _until_quiet(received, total) - started
        # Every one delivered, nothing dropped on the way (the subscriber's session, the bus),
        # unless the subscriber (paho, on a loaded machine) fell 2 s behind: then the reader
        # went on without it for SKIP_FOR seconds at a time, and only then did some drop (how
        # many depends on how long the machine starved paho: each one counted, none lost
        # silently).
        expired = metric(a, "mqtt_cluster_stream_holds_total", '{end="expired"}')
        dropped = metric(a, "mqtt_messages_dropped_total", '{tenant="acme"}')
        assert sub.nothing(0.5) and received[0] + dropped == total, (received[0], dropped)
        if expired == 0:
            assert dropped == 0
        assert metric(a, "mqtt_cluster_forward_dropped_total", '{reason="stream_gap"}') == 0
        # ... because the subscriber's node stopped reading its stream while the subscriber
        # was backed up, and the publishers' node held its publishers while that stream was.
        # Each hold ends `released` (the subscriber drained) or, when paho on a loaded machine
        # fell a connection's 2 s behind, `expired` (CI once saw only those): either shows it.
        released = metric(a, "mqtt_cluster_stream_holds_total", '{end="released"}')
        assert released + expired > 0
        assert metric(b, "mqtt_cluster_destination_backlogs_total") >= 1
        assert took > 2.0, took  # 15 MB at the subscriber's pace, not the publishers'
    finally:
        for client in clients:
            client.close()
        a.stop()
        b.stop()


def test_a_subscriber_that_never_reads_holds_publishers_on_another_node_only_for_the_allowance(
    tmp_path, redis_url
):
    a, b = _two_nodes(tmp_path, redis_url)
    clients: list[Paho] = []
    try:
        sub = _subscriber(a.port, "stuck/#", "bp-stuck")
        clients.append(sub)
        publisher = Paho(b.port, "acme/d2", "pw2", "bp-stuck-pub", connect=False)
        publisher.client.max_inflight_messages_set(1)  # one stream entry per message
        publisher.connect()
        clients.append(publisher)
        until_routed(publisher, sub, "stuck/probe")
        stuck = threading.Event()
        sub.client.on_message = lambda client, userdata, message: stuck.wait(60)  # reads no more
        acked: list[float] = []
        publisher.client.on_publish = lambda *args: acked.append(time.monotonic())
        payload = b"y" * 16 * 1024
        count = 1000  # 16 MB: more than the sockets and the session's QoS 0 cap take
        started = time.monotonic()
        for _ in range(count):
            publisher.client.publish("stuck/x", payload, 1)
        wait_for(lambda: len(acked) >= count, 30, step=0.1)
        stuck.set()
        gaps = [later - earlier for earlier, later in zip([started, *acked], acked, strict=False)]
        # The stuck subscriber held its node's stream reader (and the stream backed up behind
        # it) for the reader's allowance only: the publisher was never held for longer than a
        # connection's allowance (and a drain).
        assert max(gaps) < ReadGate.THROTTLE_LIMIT + 1.0, max(gaps)
        assert metric(a, "mqtt_cluster_stream_holds_total", '{end="expired"}') >= 1
        # Then the subscriber stalled: it holds nobody more and its messages drop, counted.
        assert metric(a, "mqtt_messages_dropped_total", '{tenant="acme"}') > 0
    finally:
        for client in clients:
            client.close()
        a.stop()
        b.stop()

"""Revocations and quota changes reach every node of the cluster within a second (issue 17,
point 4): three broker processes on the control plane's Postgres and one Redis.

Each node follows the control plane's NOTIFY channel itself (data_plane.tenancy.notifications):
the change does not travel over the cluster bus, so it reaches every node as fast as one."""

from __future__ import annotations

import subprocess
import threading
import time
import uuid

import pytest
from django.conf import settings
from django.db import connection
from django.db.models import Sum

from common.runtime.processes import data_plane_command
from tenants.acls import services as acl_services
from tenants.devices import services as device_services
from tenants.models import Usage
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.cluster.conftest import HEARTBEAT, metric, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


class Node:
    def __init__(self, process: subprocess.Popen, listeners: dict[str, tuple[str, int]]) -> None:
        self.process, self.listeners = process, listeners

    @property
    def port(self) -> int:
        return self.listeners["mqtt"][1]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def start_pg_node(redis_url: str, cluster: str, *more: str) -> Node:
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    extra = ["--log-level", "INFO", "--redis-url", redis_url, "--cluster-name", cluster]
    extra += ["--cluster-heartbeat", str(HEARTBEAT), "--metrics-port", "0", *more]
    process = subprocess.Popen(
        data_plane_command(port=0, ws_port=0, database_url=url, extra=extra),
        cwd=settings.BASE_DIR,
        stdout=subprocess.PIPE,
        text=True,
    )
    listeners: dict[str, tuple[str, int]] = {}
    while not {"mqtt", "ws", "metrics"} <= set(listeners):
        line = process.stdout.readline()
        assert line, "broker exited"
        if line.startswith("LISTENING"):
            _, name, address = line.split()
            host, port = address.rsplit(":", 1)
            listeners[name] = (host, int(port))
    connection.close()  # the brokers and the test share the database; keep ours fresh
    return Node(process, listeners)


@pytest.fixture
def three_pg(redis_url):
    name = f"pg-{uuid.uuid4().hex[:6]}"
    nodes = [start_pg_node(redis_url, name) for _ in range(3)]
    try:
        for node in nodes:
            wait_for(lambda n=node: metric(n, "mqtt_cluster_nodes") == 3, 10)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


@pytest.fixture
def acme():
    tenant = tenant_services.tenant_create("acme")
    _, first = device_services.device_create(tenant=tenant, name="sensor-1", client_id_policy="any")
    _, second = device_services.device_create(
        tenant=tenant, name="sensor-2", client_id_policy="any"
    )
    return tenant, first, second


def gone_within(clients: list[Paho], started: float, limit: float) -> list[float]:
    """Seconds from `started` until each client was disconnected (fails past `limit` + 2)."""
    out = []
    for client in clients:
        assert client.disconnected.wait(limit + 2), "still connected"
        out.append(client.gone_at - started)
    return out


def watch(client: Paho) -> Paho:
    """Note when the broker ended the connection (paho's callback thread, as it happens)."""
    previous = client.client.on_disconnect

    def on_disconnect(*args):
        client.gone_at = time.monotonic()
        previous(*args)

    client.client.on_disconnect = on_disconnect
    return client


def test_disabled_device_is_cut_on_every_node_within_a_second(three_pg, acme):
    tenant, secret, other = acme
    doomed = [
        watch(Paho(node.port, "acme/sensor-1", secret, f"cut-{i}"))
        for i, node in enumerate(three_pg)
    ]
    spared = [
        Paho(node.port, "acme/sensor-2", other, f"kept-{i}") for i, node in enumerate(three_pg)
    ]
    assert all(c.reason_code == 0 for c in doomed + spared)
    started = time.monotonic()
    device_services.device_update(tenant.devices.get(name="sensor-1"), enabled=False)
    delays = gone_within(doomed, started, 1.0)
    assert max(delays) <= 1.0, delays
    assert {c.disconnect_reason.value for c in doomed} == {0x98}  # administrative action
    time.sleep(0.3)
    assert not any(c.disconnected.is_set() for c in spared)
    for node in three_pg:  # and no node lets it back in
        again = Paho(node.port, "acme/sensor-1", secret, "again")
        again.close()
        assert again.reason_code == 0x87
    for client in doomed + spared:
        client.close()


def test_quota_change_acts_on_every_node_within_a_second(three_pg, acme):
    """A smaller max_message_size: on every node the next large PUBLISH ends its connection
    (0x95) within a second of the change."""
    tenant, _, other = acme
    clients = [
        watch(Paho(node.port, "acme/sensor-2", other, f"big-{i}"))
        for i, node in enumerate(three_pg)
    ]
    stop = threading.Event()

    def keep_publishing(client: Paho) -> None:  # 100 bytes every 20 ms until refused
        while not stop.is_set() and not client.disconnected.is_set():
            client.client.publish("sizes/x", b"x" * 100, 0)
            time.sleep(0.02)

    threads = [threading.Thread(target=keep_publishing, args=(c,)) for c in clients]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    assert not any(c.disconnected.is_set() for c in clients)  # allowed so far
    started = time.monotonic()
    tenant_services.tenant_set_quota(tenant, {"max_message_size": 10})
    try:
        delays = gone_within(clients, started, 1.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert max(delays) <= 1.0, delays
    assert {c.disconnect_reason.value for c in clients} == {0x95}  # packet too large
    for client in clients:
        client.close()


def test_usage_rows_count_a_message_crossing_nodes_once(three_pg, acme):
    """Published at b, delivered at a: the usage rows (what the bill is built from) have it
    once as received (at b) and once as sent (at a), never again at the node it crossed to."""
    tenant, secret, other = acme
    a, b, _ = three_pg
    sub = Paho(a.port, "acme/sensor-1", secret, "usage-sub")
    sub.subscribe("usage/t", qos=1)
    publisher = Paho(b.port, "acme/sensor-2", other, "usage-pub")
    sent = got = 0
    deadline = time.monotonic() + 5
    while not got:  # probes until the route has reached b: each is metered too, so count them
        assert time.monotonic() < deadline, "not routed across nodes"
        publisher.publish("usage/t", "probe")
        sent += 1
        got += len(sub.expect(1, timeout=0.1))
    time.sleep(0.3)
    got += len(sub.expect(100, timeout=0.3))
    for i in range(10):
        publisher.publish("usage/t", f"m{i}", qos=1)
    assert len(sub.expect(10, timeout=5)) == 10
    sub.close()
    publisher.close()
    for node in three_pg:  # a node writes what it metered when it stops (and every 10 s)
        node.stop()
    totals = Usage.objects.filter(tenant=tenant).aggregate(
        received=Sum("messages_in"), delivered=Sum("messages_out")
    )
    assert totals == {"received": sent + 10, "delivered": got + 10}


def test_acl_change_acts_on_every_node_within_a_second(three_pg, acme):
    """A deny rule added in the control plane: on every node the next PUBLISH to the topic is
    refused (PUBACK 0x87) within a second."""
    tenant, _, other = acme
    clients = [
        Paho(node.port, "acme/sensor-2", other, f"acl-{i}") for i, node in enumerate(three_pg)
    ]
    denied_at: dict[int, float] = {}
    for index, client in enumerate(clients):

        def on_publish(c, userdata, mid, reason_code, properties, index=index):
            if reason_code.value == 0x87:
                denied_at.setdefault(index, time.monotonic())

        client.client.on_publish = on_publish
    stop = threading.Event()

    def keep_publishing(client: Paho, index: int) -> None:
        while not stop.is_set() and index not in denied_at:
            client.client.publish("open/x", b"hello", 1).wait_for_publish(2)
            time.sleep(0.02)

    threads = [threading.Thread(target=keep_publishing, args=(c, i)) for i, c in enumerate(clients)]
    for thread in threads:
        thread.start()
    time.sleep(0.3)
    assert not denied_at  # allowed so far
    started = time.monotonic()
    acl_services.acl_add(tenant=tenant, action="publish", permission="deny", topic="open/#")
    time.sleep(1.5)
    stop.set()
    for thread in threads:
        thread.join()
    assert sorted(denied_at) == [0, 1, 2], denied_at
    delays = [at - started for at in denied_at.values()]
    assert max(delays) <= 1.0, delays
    for client in clients:
        client.close()


def test_a_flood_through_several_nodes_is_slowed_to_the_tenants_rate_never_multiplied(
    three_pg, acme
):
    """Issue 28 across nodes: two devices on two nodes each queue 150 QoS 1 publishes (paho's
    defaults) over a tenant rate of 50 msg/s held cluster-wide; a calm device on the third node
    publishes now and then. Every publish is acknowledged and delivered once, nobody is
    disconnected, the flood takes as long as the tenant's one rate says, and the calm device's
    publishes go through promptly."""
    from tests.tenancy.test_pressure import DefaultPaho

    tenant, secret, other = acme
    tenant_services.tenant_set_quota(tenant, {"max_publish_rate": 50})
    time.sleep(0.5)
    a, b, c = three_pg
    received: dict[bytes, int] = {}
    sub = Paho(c.port, "acme/sensor-2", other, "counter")
    sub.client.on_message = lambda cl, u, m: received.__setitem__(
        m.payload, received.get(m.payload, 0) + 1
    )
    sub.subscribe("flood/#", 1)
    floods = [
        DefaultPaho(node.port, secret, f"flood-{i}", user="acme/sensor-1")
        for i, node in enumerate((a, b))
    ]
    calm = DefaultPaho(c.port, other, "calm", user="acme/sensor-2")
    time.sleep(0.5)  # the subscriber's route reaches a and b
    started = time.monotonic()
    infos = [
        flood.client.publish(f"flood/{i}", f"{i}-{n}".encode(), 1)
        for n in range(150)
        for i, flood in enumerate(floods)
    ]
    calm_waits = []
    while not all(info.is_published() for info in infos) and time.monotonic() - started < 30:
        sent = time.monotonic()
        calm.client.publish("flood/calm", f"calm-{len(calm_waits)}".encode(), 1).wait_for_publish(5)
        calm_waits.append(time.monotonic() - sent)
        time.sleep(0.5)
    took = time.monotonic() - started
    time.sleep(1)
    disconnects = [client.disconnects[:] for client in (*floods, calm)]
    for client in (*floods, calm):
        client.close()
    sub.close()
    assert all(info.is_published() for info in infos)
    assert disconnects == [[], [], []]
    expected = {f"{i}-{n}".encode() for n in range(150) for i in range(2)}
    expected |= {f"calm-{n}".encode() for n in range(len(calm_waits))}
    assert set(received) == expected and max(received.values()) == 1
    # 300 at 50/s cluster-wide (each node alone would have let 50/s through: 3 s at most).
    assert took >= 4.0, took
    assert max(calm_waits) < 1.0, calm_waits

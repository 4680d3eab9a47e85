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

from common.processes import data_plane_command
from tenants import services
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


def start_pg_node(redis_url: str, cluster: str) -> Node:
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    extra = ["--log-level", "INFO", "--redis-url", redis_url, "--cluster-name", cluster]
    extra += ["--cluster-heartbeat", str(HEARTBEAT), "--metrics-port", "0"]
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
    tenant = services.tenant_create("acme")
    _, first = services.device_create(tenant=tenant, name="sensor-1", client_id_policy="any")
    _, second = services.device_create(tenant=tenant, name="sensor-2", client_id_policy="any")
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
    services.device_update(tenant.devices.get(name="sensor-1"), enabled=False)
    delays = gone_within(doomed, started, 1.0)
    assert max(delays) <= 1.0, delays
    assert {c.disconnect_reason.value for c in doomed} == {0x98}  # administrative action
    time.sleep(0.3)
    assert not any(c.disconnected.is_set() for c in spared)
    for node in three_pg:  # and no node lets it back in
        assert Paho(node.port, "acme/sensor-1", secret, "again").reason_code == 0x87
    for client in spared:
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
    services.tenant_set_quota(tenant, {"max_message_size": 10})
    try:
        delays = gone_within(clients, started, 1.0)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert max(delays) <= 1.0, delays
    assert {c.disconnect_reason.value for c in clients} == {0x95}  # packet too large

"""Replay from a time across the nodes of a cluster (issue 45): a `$replay` subscriber at one
node gets what a publisher at another node sent, history then live, each message once and in
order, while the publisher runs through the switch. Real broker processes on the test Postgres,
Redis and one archive, paho clients."""

from __future__ import annotations

import threading
import time

import pytest

from tenants.devices import services as device_services
from tenants.history.services import history_policy_create
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.cluster.conftest import PgNode, metric, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_replay_at_one_node_of_what_another_node_took_has_every_message_once(
    redis_url, tmp_path, monkeypatch
):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    tenant = tenant_services.tenant_create("relay")
    tenant_services.tenant_set_quota(tenant, {"max_publish_rate": 1_000_000})
    history_policy_create(tenant=tenant, topic_filter="#", days=1)
    _, secret = device_services.device_create(tenant=tenant, name="d", client_id_policy="any")
    cluster = "replay-" + tmp_path.name[-6:]
    a, b = (PgNode(redis_url, cluster, archive=True) for _ in range(2))
    try:
        for node in (a, b):
            wait_for(lambda n=node: metric(n, "mqtt_cluster_nodes") == 2, 10)
        pub = Paho(b.port, "relay/d", secret, "pub")
        sent: list[str] = []
        stop = threading.Event()

        def publish() -> None:  # at node b, through the switch from history to live at node a
            i = 0
            while not stop.is_set():
                pub.publish("plant/temp", f"m{i}", 2)
                sent.append(f"m{i}")
                i += 1

        worker = threading.Thread(target=publish)
        worker.start()
        while len(sent) < 300:
            time.sleep(0.01)
        sub = Paho(a.port, "relay/d", secret, "replayer")
        assert sub.subscribe("$replay/1h/plant/temp", 2)[0].value == 2
        while len(sent) < 900:
            time.sleep(0.01)
        stop.set()
        worker.join(10)
        got = [m.payload.decode() for m in sub.expect(len(sent), 30)]
        assert got == [f"m{i}" for i in range(len(sent))]  # none missed, none twice, in order
        assert sub.nothing(0.5)
        for client in (pub, sub):
            client.close()
    finally:
        for node in (a, b):
            node.stop()

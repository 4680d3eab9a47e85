"""A cluster of two nodes answers one journey: each node records what it decided, in one
object store, and the API reads both; each node counts its outcomes on /metrics."""

import time
import uuid

import pytest

from tenants import services
from tests.api.conftest import client_for
from tests.broker.clients import Paho
from tests.cluster.conftest import metric, wait_for
from tests.cluster.test_limits_pg import start_pg_node

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_nodes_one_journey(redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    tenant, _, token = services.signup(tenant="acme", email="o@acme.io", password="pass-w0rd-a")
    _, secret = services.device_create(tenant=tenant, name="d", client_id_policy="any")
    name = f"journey-{uuid.uuid4().hex[:6]}"
    nodes = [start_pg_node(redis_url, name, "--journey-interval", "0.2") for _ in range(2)]
    try:
        for node in nodes:
            wait_for(lambda n=node: metric(n, "mqtt_cluster_nodes") == 2, 10)
        first, second = nodes
        listener = Paho(second.port, "acme/d", secret, "listener")
        listener.subscribe("plant/#", 1)
        talker = Paho(first.port, "acme/d", secret, "talker")
        deadline = time.monotonic() + 5
        while not listener.expect(1, 0.3):  # until the route reached the first node
            talker.publish("plant/warmup", b"{}", 1)
            assert time.monotonic() < deadline, "never routed"
        talker.publish("plant/boiler", b'{"bar": 2.1}', 1)
        assert [m.topic for m in listener.expect(1, 3)] == ["plant/boiler"]
        listener.publish("nobody/here", b"{}", 1)

        api = client_for(token)
        deadline = time.monotonic() + 8
        while True:
            rows = api.get("/api/v1/journey", {"topic": "plant/boiler"}).json()["results"]
            lonely = api.get("/api/v1/journey", {"outcome": "no_subscribers"}).json()["results"]
            if (rows and lonely) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert [(r["outcome"], r["sessions"], r["client_id"]) for r in rows] == [
            ("delivered", 1, "talker")
        ]
        assert [(r["topic"], r["client_id"]) for r in lonely] == [("nobody/here", "listener")]
        assert rows[0]["node"] != lonely[0]["node"]  # recorded where each was decided
        labels = '{cause="",outcome="delivered",tenant="acme"}'
        wait_for(lambda: metric(first, "mqtt_journey_outcomes_total", labels) >= 2, 5)
        for client in (listener, talker):
            client.close()
    finally:
        for node in nodes:
            node.stop()

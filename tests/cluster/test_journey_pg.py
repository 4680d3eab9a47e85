"""A cluster of two nodes answers one journey: each node records what it decided, in one
object store, and the API reads both; each node counts its outcomes on /metrics; a client that
moves between nodes leaves rows naming where its session came from and where it went."""

import time
import uuid

import pytest

from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tests.api.conftest import client_for
from tests.broker.clients import Paho
from tests.cluster.conftest import metric, wait_for
from tests.cluster.test_limits_pg import start_pg_node

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_nodes_one_journey(redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    tenant, _, token = account_services.signup(
        tenant="acme", email="o@acme.io", password="pass-w0rd-a"
    )
    _, secret = device_services.device_create(tenant=tenant, name="d", client_id_policy="any")
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

        # Where did my client go? The talker's client id connects at the second node (the
        # first one's connection gets 0x8E), then once more there (a takeover within a node).
        first_node, second_node = rows[0]["node"], lonely[0]["node"]
        moved = Paho(second.port, "acme/d", secret, "talker")
        assert talker.disconnected.wait(5) and talker.disconnect_reason.value == 0x8E
        talker.stop_loop()  # no reconnection: it would take the client id back
        again = Paho(second.port, "acme/d", secret, "talker")
        assert moved.disconnected.wait(5) and moved.disconnect_reason.value == 0x8E
        moved.stop_loop()
        deadline = time.monotonic() + 8
        while True:
            events = api.get("/api/v1/clients/talker/events").json()["results"]
            if len(events) >= 5 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        life = [
            (e["event"], e["node"], e["from_node"], e["to_node"])
            for e in reversed(events)
            if e["event"] in ("connected", "taken_over")
        ]
        assert life == [
            ("connected", first_node, None, None),
            ("taken_over", first_node, None, second_node),
            ("connected", second_node, first_node, None),
            ("taken_over", second_node, None, second_node),
            ("connected", second_node, second_node, None),
        ]
        words = [e["reason"] for e in reversed(events) if e["event"] in ("connected", "taken_over")]
        assert f"at node {second_node}" in words[1]
        assert f"from node {first_node}" in words[2]
        assert "same node" in words[3] and "same node" in words[4]
        for client in (listener, again):
            client.close()
    finally:
        for node in nodes:
            node.stop()

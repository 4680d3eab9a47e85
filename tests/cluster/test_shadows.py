"""Shadows across a cluster: two broker processes on one database and one Redis. A device on
one node changes another's shadow (its ACL grants it) and the delta reaches the thing on the
other node, through the ordinary publish path; a REST change is published by exactly one node
and reaches subscribers on both, once; two nodes racing with the same version: one wins."""

from __future__ import annotations

import uuid

import pytest

from tenants.acls import services as acl_services
from tenants.devices import services as device_services
from tests.cluster.conftest import PgNode, metric, wait_for
from tests.shadows.conftest import Watcher, api_client, make_fleet

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def two_nodes(redis_url):
    cluster = f"shadows-{uuid.uuid4().hex[:6]}"
    nodes = [PgNode(redis_url, cluster) for _ in range(2)]
    for node in nodes:
        wait_for(lambda n=node: metric(n, "mqtt_cluster_nodes") == 2, 10)
    yield nodes
    for node in nodes:  # both at once: each takes seconds to leave the cluster
        node.process.terminate()
    for node in nodes:
        node.stop()


def test_shadow_replies_cross_nodes_once(two_nodes, tmp_path):
    first, second = two_nodes
    fleet = make_fleet(tmp_path)
    for name in ("lamp", "app"):
        _, fleet.secrets[name] = device_services.device_create(tenant=fleet.tenant, name=name)
    acl_services.acl_add(
        tenant=fleet.tenant,
        device=fleet.tenant.devices.get(name="app"),
        action="both",
        permission="allow",
        topic="$aws/things/lamp/shadow/#",
    )
    lamp = Watcher(first.port, fleet, "lamp", subscribe="$aws/things/lamp/shadow/update/delta")
    app = Watcher(second.port, fleet, "app", subscribe="$aws/things/lamp/shadow/update/+")
    try:
        probe = "$aws/things/lamp/shadow/update"
        # The route of the lamp's subscription reaches the other node within a heartbeat.
        wait_for(lambda: metric(second, "mqtt_cluster_remote_routes") >= 1, 5)
        app.paho.publish(probe, '{"state": {"desired": {"color": "red"}}}', 1)
        ((topic, delta),) = lamp.get(1)
        assert topic.endswith("/update/delta") and delta["state"] == {"color": "red"}
        assert {t.rsplit("/", 1)[1] for t, _ in app.get(3)} == {"accepted", "delta", "documents"}

        # Both nodes race to update version 1: the row lock lets one in, the other gets 409.
        lamp.paho.client.publish(probe, '{"state": {"reported": {"a": 1}}, "version": 1}', 1)
        app.paho.client.publish(probe, '{"state": {"reported": {"b": 1}}, "version": 1}', 1)
        outcomes = [t.rsplit("/", 1)[1] for t, _ in app.get(4, timeout=5)]
        assert outcomes.count("rejected") == 1 and outcomes.count("accepted") == 1, outcomes
        assert len(lamp.get(1)) == 1  # the winner's delta (desired red, reported a or b)
        assert app.paho.nothing(0.3) and lamp.paho.nothing(0.1)

        # A REST change: published by one node, received once on each.
        owner = api_client(fleet.tenant)
        body = '{"state": {"desired": {"color": "blue"}}}'
        made = owner.generic(
            "POST", "/api/v1/devices/lamp/shadow", body, content_type="application/json"
        )
        assert made.status_code == 200
        assert [d["state"]["color"] for _, d in lamp.get(1)] == ["blue"]
        assert sorted(t.rsplit("/", 1)[1] for t, _ in app.get(3)) == [
            "accepted",
            "delta",
            "documents",
        ]
        assert lamp.paho.nothing(0.5) and app.paho.nothing(0.1)  # once each, not per node
    finally:
        lamp.close()
        app.close()

"""Persistent sessions in a cluster on Postgres: one node holds each (never every node)."""

from __future__ import annotations

import uuid

import pytest

from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.cluster.conftest import PgNode, metric, until_routed, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_persistent_session_is_restored_by_one_node_only(redis_url):
    tenant = tenant_services.tenant_create(f"keep{uuid.uuid4().hex[:6]}")
    _, secret = device_services.device_create(tenant=tenant, name="d", client_id_policy="any")
    user = f"{tenant.slug}/d"
    cluster = f"pg-{uuid.uuid4().hex[:6]}"
    a = PgNode(redis_url, cluster)
    b = None
    try:
        keeper = Paho(a.port, user, secret, "keeper", clean=False, expiry=3600)
        keeper.subscribe("keep/#", qos=1)
        keeper.close()
        b = PgNode(redis_url, cluster)  # starts after: finds the session in the database
        wait_for(lambda: metric(b, "mqtt_cluster_nodes") == 2, 10)
        assert metric(a, "mqtt_sessions") == 1
        assert metric(b, "mqtt_sessions") == 0  # held by node a: not restored here too
        probe = Paho(a.port, user, secret, "probe")
        probe.subscribe("keep/#", qos=1)
        publisher = Paho(b.port, user, secret, "publisher")
        until_routed(publisher, probe, "keep/probe")
        probe.close()
        for i in range(3):
            publisher.publish(f"keep/{i}", str(i), qos=1)
        back = Paho(a.port, user, secret, "keeper", clean=False, expiry=3600)
        got = [m.payload for m in back.expect(20, timeout=3) if m.topic != "keep/probe"]
        assert got == [b"0", b"1", b"2"]  # queued once, at the node that holds the session
        back.close()
        publisher.close()
    finally:
        a.stop()
        if b is not None:
            b.stop()

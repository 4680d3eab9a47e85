"""Inspection across a cluster of two broker nodes on Postgres (issue 30, point 4): one
`GET /api/v1/sessions` lists the sessions of both nodes, each with the node that holds it (the
cluster's own node id), and a retained message deleted through the API is forgotten by every
node: a new subscriber on either no longer receives it."""

from __future__ import annotations

import json
import uuid

import pytest
import redis

from tests.cluster.conftest import PgNode, metric, wait_for
from tests.inspection.world import json_of, tenant, until

pytestmark = pytest.mark.django_db(transaction=True)


def node_ids_by_pid(url: str, cluster: str) -> dict[int, str]:
    """The cluster's members as their heartbeat keys describe them: pid -> node id."""
    bus = redis.Redis.from_url(url)
    prefix = f"mqtt-cluster:{cluster}"
    out = {}
    for member in bus.smembers(f"{prefix}:members"):
        info = bus.get(f"{prefix}:node:{member.decode()}")
        if info:
            described = json.loads(info)
            out[described["pid"]] = described["node"]
    return out


def test_two_nodes_sessions_in_one_list_and_retained_deleted_on_both(redis_url, monkeypatch):
    monkeypatch.setenv("MQTT_SESSION_FIGURES_INTERVAL", "0.3")
    cluster = f"insp-{uuid.uuid4().hex[:6]}"
    a = PgNode(redis_url, cluster)
    b = PgNode(redis_url, cluster)
    acme = tenant("acme", a.port)
    try:
        wait_for(lambda: metric(a, "mqtt_cluster_nodes") == 2, 10)
        ids = node_ids_by_pid(redis_url, cluster)
        node_a, node_b = ids[a.process.pid], ids[b.process.pid]
        acme.client("on-a").subscribe("x/#", 0)
        acme.port = b.port
        acme.client("on-b").subscribe("y/#", 0)
        publisher = acme.client("pub-b")
        publisher.publish("r/1", b"kept", qos=1, retain=True)

        def nodes():
            rows = json_of(acme.api.get("/api/v1/sessions"))["results"]
            return {r["client_id"]: r["node"] for r in rows} if len(rows) == 3 else None

        assert until(nodes) == {"on-a": node_a, "on-b": node_b, "pub-b": node_b}
        assert node_a != node_b

        def sees_retained(port: int) -> bool:
            acme.port = port
            probe = acme.client(f"probe-{uuid.uuid4().hex[:4]}")
            probe.subscribe("r/#", 1)
            got = bool(probe.expect(1, timeout=0.5))
            probe.close()
            acme.clients.remove(probe)
            return got

        assert until(lambda: sees_retained(a.port), within=5)  # reached the other node too
        deleted = json_of(acme.api.delete("/api/v1/retained?topic=r/%2B"))
        assert deleted == {"topic": "r/+", "deleted": 1}
        until(lambda: not sees_retained(a.port) and not sees_retained(b.port), within=5)
    finally:
        acme.close()
        a.stop()
        b.stop()

"""Persistent sessions in a cluster on Postgres: one node holds each (never every node)."""

from __future__ import annotations

import subprocess
import uuid

import pytest
from django.conf import settings
from django.db import connection

from common.processes import data_plane_command
from tenants import services
from tests.broker.clients import Paho
from tests.cluster.conftest import metric, until_routed, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


class PgNode:
    def __init__(self, redis_url: str, cluster: str) -> None:
        db = connection.settings_dict
        url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
        extra = ["--redis-url", redis_url, "--cluster-name", cluster, "--cluster-heartbeat", "1"]
        self.process = subprocess.Popen(
            data_plane_command(
                port=0,
                ws_port=0,
                database_url=url,
                extra=[*extra, "--metrics-port", "0", "--no-archive", "--log-level", "INFO"],
            ),
            cwd=settings.BASE_DIR,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.listeners: dict[str, tuple[str, int]] = {}
        while not {"mqtt", "ws", "metrics"} <= set(self.listeners):
            line = self.process.stdout.readline()
            assert line, "broker exited"
            if line.startswith("LISTENING"):
                _, name, address = line.split()
                host, port = address.rsplit(":", 1)
                self.listeners[name] = (host, int(port))
        connection.close()  # the brokers and the test share the database

    @property
    def port(self) -> int:
        return self.listeners["mqtt"][1]

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=15)


def test_a_persistent_session_is_restored_by_one_node_only(redis_url):
    tenant = services.tenant_create(f"keep{uuid.uuid4().hex[:6]}")
    _, secret = services.device_create(tenant=tenant, name="d", client_id_policy="any")
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

"""Spend control across the cluster (issue 33, point 3): with at_limit degrade, the check that
finds the budget reached makes every broker node refuse new CONNECTs (0x97, reason string
"monthly budget reached"; 3.1.1: return code 3) while a connected device keeps publishing and
receiving; raising the budget lets new connections in again at once, on every node. Two broker
processes on the control plane's Postgres and one Redis."""

from __future__ import annotations

import socket
import struct
import time
import uuid

import pytest

from tenants.accounts import services as account_services
from tenants.budgets.alerts import check_all
from tenants.devices import services as device_services
from tenants.models import Tenant
from tests.api.conftest import client_for
from tests.billing.test_budget_alerts import metered
from tests.broker.clients import Paho
from tests.cluster.conftest import metric, wait_for
from tests.cluster.test_limits_pg import start_pg_node
from tests.mqtt_bytes import string, varint

pytestmark = pytest.mark.django_db(transaction=True)


def connack_311(port: int, username: str, password: str, client_id: str) -> int:
    """The return code of a CONNACK to a 3.1.1 CONNECT written by hand."""
    variable = string("MQTT") + bytes([4, 0xC2]) + struct.pack("!H", 30)
    payload = string(client_id) + string(username) + string(password)
    body = variable + payload
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"\x10" + varint(len(body)) + body)
        answer = b""
        while len(answer) < 4:
            chunk = sock.recv(4 - len(answer))
            assert chunk, "closed before CONNACK"
            answer += chunk
    assert answer[:2] == b"\x20\x02", answer
    return answer[3]


def connack_5(port: int, username: str, password: str, client_id: str) -> int:
    """The reason code of a CONNACK to an MQTT 5 CONNECT written by hand (a socket, no client
    thread: paho's close alone can take its loop's one-second select, more than the bound)."""
    variable = string("MQTT") + bytes([5, 0xC2]) + struct.pack("!H", 30) + varint(0)
    body = variable + string(client_id) + string(username) + string(password)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(b"\x10" + varint(len(body)) + body)
        answer = b""
        while len(answer) < 4:  # fixed header, length, flags, reason code
            chunk = sock.recv(4 - len(answer))
            assert chunk, "closed before CONNACK"
            answer += chunk
    assert answer[0] == 0x20, answer
    return answer[3]


def connect_code(port: int, secret: str, client_id: str) -> tuple[int, str | None]:
    """A new MQTT 5 connection's CONNACK reason code and reason string (then it is closed)."""
    client = Paho(port, "acme/d", secret, client_id)
    reason = getattr(client.connack_properties, "ReasonString", None)
    code = client.reason_code.value
    client.close()
    return code, reason


def test_degrade_refuses_new_connects_on_every_node_keeps_sessions_and_lifts(redis_url):
    tenant, _, token = account_services.signup(
        tenant="acme", email="o@acme.io", password="pass-w0rd-a"
    )
    _, secret = device_services.device_create(tenant=tenant, name="d", client_id_policy="any")
    api = client_for(token)
    name = f"budget-{uuid.uuid4().hex[:6]}"
    nodes = [start_pg_node(redis_url, name) for _ in range(2)]
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

        answer = api.put(
            "/api/v1/budget", {"monthly_cents": 100, "at_limit": "degrade"}, format="json"
        )
        assert answer.status_code == 200 and answer.json()["degraded"] is False
        metered(tenant, 2_000_000)  # 1.00 USD on the free plan: 100 % of the budget
        assert check_all()["degraded"] == 1  # the beat task's run (every BUDGET_CHECK_SECONDS)
        checked = time.monotonic()
        assert Tenant.objects.get(id=tenant.id).budget_degraded

        for index, node in enumerate(nodes):  # every node, within a second of the check
            wait_for(
                lambda n=node, i=index: connack_5(n.port, "acme/d", secret, f"new-{i}") == 0x97, 1
            )
        enforced = time.monotonic() - checked
        assert enforced < 1.0, enforced
        assert connect_code(second.port, secret, "new-again") == (0x97, "monthly budget reached")
        assert connack_311(first.port, "acme/d", secret, "old-client") == 3  # Server unavailable

        talker.publish("plant/boiler", b'{"bar": 2.1}', 1)  # connected devices keep working
        assert [m.topic for m in listener.expect(1, 3)] == ["plant/boiler"]
        assert not talker.disconnected.is_set() and not listener.disconnected.is_set()
        refusals = '{kind="quota_exceeded",reason_code="0x97",tenant="acme"}'
        assert metric(first, "mqtt_refusals_total", refusals) >= 1
        assert metric(second, "mqtt_quota_exceeded_total", '{quota="budget",tenant="acme"}') >= 1
        body = api.get("/api/v1/budget").json()
        assert body["degraded"] is True and body["percent"] == 100.0
        assert ("budget", 100) in {(a["kind"], a["threshold"]) for a in body["alerts"]}

        lifted = api.put(  # raised: new connections again at once, on every node
            "/api/v1/budget", {"monthly_cents": 1000, "at_limit": "degrade"}, format="json"
        )
        assert lifted.json()["degraded"] is False
        for index, node in enumerate(nodes):
            wait_for(
                lambda n=node, i=index: connack_5(n.port, "acme/d", secret, f"back-{i}") == 0, 1
            )
        for client in (listener, talker):
            client.close()
    finally:
        for node in nodes:
            node.stop()

"""Device shadows through paho-mqtt with MQTT 5, on the topics AWS documents (no SDK): the flow
with its replies, each reply once per request (AWS's 429 past 10 in flight), the PUBACK reason
codes; and the attacker's side: another tenant's thing of the same name, a device reaching for
another device's shadow (refused, unless the tenant's ACL grants it), forged replies."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from common.stores.object_store import LocalObjectStore
from tenants.acls import services as acl_services
from tenants.devices import services as device_services
from tenants.journey.selectors import JourneyReader
from tenants.journey.words import describe_outcome
from tenants.tenant import services as tenant_services
from tests.shadows.conftest import Watcher, api_client

pytestmark = pytest.mark.django_db(transaction=True)

NOT_AUTHORIZED = 0x87


def codes(client) -> dict[int, int]:
    """PUBACK reason codes by message id, as they arrive."""
    acks: dict[int, int] = {}
    client.paho.client.on_publish = lambda c, u, mid, rc, props: acks.__setitem__(mid, rc.value)
    return acks


def send(watcher: Watcher, topic: str, body, acks: dict | None = None, qos: int = 1) -> int:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    info = watcher.paho.client.publish(topic, payload, qos)
    if qos:
        info.wait_for_publish(5)
        if acks is not None:
            deadline = time.monotonic() + 5
            while info.mid not in acks and time.monotonic() < deadline:
                time.sleep(0.01)
            return acks[info.mid]
    return 0


def test_paho_mqtt5_shadow_flow(tls_broker, fleet):
    fleet.device("lamp")
    lamp = Watcher(tls_broker.port, fleet, "lamp")
    acks = codes(lamp)
    base = "$aws/things/lamp/shadow"
    try:
        assert send(lamp, f"{base}/get", {"clientToken": "c0"}, acks) == 0
        assert lamp.get(1) == [
            (
                f"{base}/get/rejected",
                {
                    "code": 404,
                    "message": "No shadow exists with name: 'lamp'",
                    "timestamp": pytest.approx(time.time(), abs=5),
                    "clientToken": "c0",
                },
            )
        ]
        send(lamp, f"{base}/update", {"state": {"desired": {"on": True}}, "clientToken": "c1"})
        replies = dict(lamp.get(3))
        assert replies[f"{base}/update/accepted"]["clientToken"] == "c1"
        assert replies[f"{base}/update/delta"]["state"] == {"on": True}
        assert replies[f"{base}/update/documents"]["current"]["version"] == 1
        send(lamp, f"{base}/update", {"state": {"reported": {"on": True}}, "version": 1})
        assert sorted(t for t, _ in lamp.get(2)) == [
            f"{base}/update/accepted",
            f"{base}/update/documents",
        ]
        send(lamp, f"{base}/update", {"state": {"reported": {"on": False}}, "version": 1})
        assert lamp.get(1)[0][1]["code"] == 409
        send(lamp, f"{base}/update", b"not json")
        assert lamp.get(1)[0][1]["message"] == "Invalid JSON"
        send(lamp, f"{base}/name/cfg/update", {"state": {"reported": {"mode": "eco"}}})
        assert {t for t, _ in lamp.get(2)} == {
            f"{base}/name/cfg/update/accepted",
            f"{base}/name/cfg/update/documents",
        }

        # Fifty requests at once: each answered exactly once, past 10 in flight with AWS's 429.
        for n in range(50):
            send(lamp, f"{base}/get", {"clientToken": f"burst-{n}"}, qos=0)
        answers = lamp.get(50, timeout=10)
        assert sorted(body["clientToken"] for _, body in answers) == sorted(
            f"burst-{n}" for n in range(50)
        )
        throttled = [body for topic, body in answers if topic.endswith("/rejected")]
        assert throttled and all(b["code"] == 429 for b in throttled)
        assert all(body["version"] == 2 for topic, body in answers if topic.endswith("/accepted"))

        send(lamp, f"{base}/delete", b"")
        assert lamp.get(1)[0] == (
            f"{base}/delete/accepted",
            {"version": 2, "timestamp": pytest.approx(time.time(), abs=5)},
        )
        assert lamp.paho.nothing(0.3)

        # The journey says where each request went (the shadow service), its replies delivered.
        reader = JourneyReader(LocalObjectStore(tls_broker.folder / "objects"))
        window = {"start": datetime.now(UTC) - timedelta(minutes=5), "end": datetime.now(UTC)}
        deadline = time.monotonic() + 10
        while True:
            window["end"] = datetime.now(UTC) + timedelta(minutes=1)
            rows = reader.messages(fleet.slug, topic=f"{base}/update/#", **window).rows
            served = [r for r in rows if r["outcome"] == "served"]
            if len(served) == 4 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert [r["topic"] for r in served] == [f"{base}/update"] * 4, rows
        assert "shadow service" in describe_outcome(served[0])["reason"]
        replies = {r["topic"] for r in rows if r["outcome"] == "delivered"}
        assert f"{base}/update/accepted" in replies
    finally:
        lamp.close()


def test_attackers_cannot_reach_another_things_shadow(tls_broker, fleet):
    fleet.device("lamp")
    fleet.device("door")
    evil = fleet.__class__(
        tenant_services.tenant_create(f"ev{fleet.slug[2:]}"), fleet.folder, None, None
    )
    _, evil.secrets["lamp"] = device_services.device_create(tenant=evil.tenant, name="lamp")
    lamp = Watcher(tls_broker.port, fleet, "lamp")
    door = Watcher(tls_broker.port, fleet, "door", subscribe="#")
    twin = Watcher(tls_broker.port, evil, "lamp")  # the same thing name, another tenant
    door_acks = codes(door)
    owner = api_client(fleet.tenant)
    try:
        # Another tenant's thing of the same name is its own: nothing crosses either way.
        send(twin, "$aws/things/lamp/shadow/update", {"state": {"reported": {"evil": 1}}})
        assert {t for t, _ in twin.get(2)} == {
            "$aws/things/lamp/shadow/update/accepted",
            "$aws/things/lamp/shadow/update/documents",
        }
        assert lamp.paho.nothing(0.3)
        assert owner.get("/api/v1/devices/lamp/shadow").status_code == 404

        # A device of the same tenant reaching for the lamp's shadow: refused at the door.
        for topic in ("$aws/things/lamp/shadow/update", "$aws/things/lamp/shadow/delete"):
            assert (
                send(door, topic, {"state": {"desired": {"open": 1}}}, door_acks) == NOT_AUTHORIZED
            )
        for forged in (
            "$aws/things/lamp/shadow/update/delta",
            "$aws/things/door/shadow/update/accepted",
        ):
            assert send(door, forged, {"state": {"open": 1}}, door_acks) == NOT_AUTHORIZED
        for topic_filter in (
            "$aws/things/lamp/shadow/update/delta",
            "$aws/things/+/shadow/update/delta",
            "$aws/#",
        ):
            assert door.paho.subscribe(topic_filter, 1)[0].value == NOT_AUTHORIZED
        assert lamp.paho.nothing(0.3)
        send(lamp, "$aws/things/lamp/shadow/update", {"state": {"desired": {"secret": 42}}})
        assert len(lamp.get(3)) == 3
        assert door.paho.nothing(0.5)  # its `#` carries none of the lamp's shadow

        # Unless the tenant's ACL grants it: the door may then read and change the lamp's.
        door_id = fleet.tenant.devices.get(name="door")
        acl_services.acl_add(
            tenant=fleet.tenant,
            device=door_id,
            action="both",
            permission="allow",
            topic="$aws/things/lamp/shadow/#",
        )
        deadline = time.monotonic() + 5
        while door.paho.subscribe("$aws/things/lamp/shadow/update/+", 1)[0].value != 1:
            assert time.monotonic() < deadline, "the grant never reached the broker"
            time.sleep(0.1)
        assert (
            send(
                door,
                "$aws/things/lamp/shadow/update",
                {"state": {"desired": {"open": 1}}},
                door_acks,
            )
            == 0
        )
        seen = {t for t, _ in door.get(3)}
        assert "$aws/things/lamp/shadow/update/delta" in seen
        assert len(lamp.get(3)) == 3
        assert (
            send(door, "$aws/things/gate/shadow/update", {"state": {}}, door_acks) == NOT_AUTHORIZED
        )
    finally:
        for watcher in (lamp, door, twin):
            watcher.close()

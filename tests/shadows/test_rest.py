"""The REST API for applications (AWS's Get/Update/DeleteThingShadow on a device of the tenant),
end to end: what it answers, with `ETag` and `If-Match` on the version, and what it makes the
broker publish to devices (the same `…/accepted`, `/delta`, `/documents` an MQTT update causes);
the history; other tenants and read-only members kept out."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from tenants.devices import services as device_services
from tenants.models import ShadowVersion
from tenants.shadows import services as shadow_services
from tenants.tenant import services as tenant_services
from tests.shadows.conftest import Watcher, api_client

pytestmark = pytest.mark.django_db(transaction=True)

SHADOW = "/api/v1/devices/{}/shadow"


def post(client, url: str, body, **headers):
    data = body if isinstance(body, bytes) else json.dumps(body)
    return client.generic("POST", url, data, content_type="application/json", **headers)


def test_rest_update_reaches_the_device_and_if_match_guards_the_version(tls_broker, fleet):
    fleet.device("lamp")
    owner = api_client(fleet.tenant)
    lamp = Watcher(tls_broker.port, fleet, "lamp")
    url = SHADOW.format("lamp")
    try:
        assert owner.get(url).status_code == 404
        made = post(owner, url, {"state": {"desired": {"color": "red"}}, "clientToken": "app-1"})
        assert made.status_code == 200, made.content
        assert made["ETag"] == '"1"'
        assert made.json()["state"] == {"desired": {"color": "red"}}
        assert made.json()["clientToken"] == "app-1"
        got = dict(lamp.get(3))  # what the device is told, as if an MQTT client had asked
        assert got["$aws/things/lamp/shadow/update/accepted"]["version"] == 1
        assert got["$aws/things/lamp/shadow/update/delta"]["state"] == {"color": "red"}
        assert got["$aws/things/lamp/shadow/update/documents"]["previous"] is None

        stale = post(owner, url, {"state": {"desired": {"color": "blue"}}}, HTTP_IF_MATCH='"0"')
        assert stale.status_code == 412 and "version 1" in stale.json()["error"]["message"]
        conflict = post(owner, url, {"state": {"desired": {"color": "blue"}}, "version": 0})
        assert conflict.status_code == 409
        assert conflict.json()["error"]["aws"]["message"] == "Version conflict"
        assert lamp.paho.nothing(0.5)  # refused changes tell devices nothing (as AWS)
        moved = post(owner, url, {"state": {"desired": {"color": "blue"}}}, HTTP_IF_MATCH='"1"')
        assert moved.status_code == 200 and moved["ETag"] == '"2"'
        assert len(lamp.get(3)) == 3

        current = owner.get(url)
        assert current["ETag"] == '"2"'
        assert current.json()["state"]["delta"] == {"color": "blue"}
        history = owner.get(url + "/history").json()["results"]
        assert [(h["version"], h["via"]) for h in history] == [(2, "api"), (1, "api")]
        assert history[0]["request"] == {"desired": {"color": "blue"}}
        assert history[0]["actor"].startswith("api:owner-")

        named = post(owner, "/api/v1/devices/lamp/shadows/ota", {"state": {"reported": {"v": 1}}})
        assert named.status_code == 200
        listed = owner.get("/api/v1/devices/lamp/shadows").json()["results"]
        assert [s["name"] for s in listed] == ["ota"]
        lamp.get(2)  # (the named shadow's accepted and documents)

        gone = owner.delete(url, HTTP_IF_MATCH='"2"')
        assert gone.status_code == 200 and gone.json()["version"] == 2
        assert lamp.get(1)[0] == ("$aws/things/lamp/shadow/delete/accepted", gone.json())
        assert owner.get(url).status_code == 404
        assert owner.delete(url).status_code == 404
    finally:
        lamp.close()


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"{nope", 400, "Invalid JSON"),
        ({"desired": {"a": 1}}, 400, "Missing required node: state"),
        (
            {"state": {"desired": {"a": "x" * 9000}}},
            413,
            "The payload exceeds the maximum size allowed",
        ),
        (
            b'{"state": {"desired": {"a": "\xff"}}}',
            415,
            "Unsupported documented encoding; supported encoding is UTF-8",
        ),
        # Once 500s (Postgres refused NaN; the parser recursed past Python's limit):
        (
            b'{"state": {"reported": {"t": NaN}}}',
            400,
            "Invalid JSON: NaN and Infinity are not JSON numbers",
        ),
        (
            b'{"state": {"desired": ' + b'{"a":' * 1200 + b"1" + b"}" * 1202,
            400,
            "JSON contains too many levels of nesting; maximum is 6",
        ),
        (
            b'{"state": {"desired": {}}, "clientToken": "\\ud800"}',
            400,
            "Invalid JSON: a string holds a lone UTF-16 surrogate (\\ud800-\\udfff)",
        ),
    ],
)
def test_rest_refusals_name_the_problem_in_aws_words(fleet, body, status, message):
    fleet.device("lamp")
    answer = post(api_client(fleet.tenant), SHADOW.format("lamp"), body)
    assert answer.status_code == status
    assert answer.json()["error"]["message"] == message
    assert answer.json()["error"]["aws"]["code"] == status


def test_rest_keeps_tenants_and_roles_apart(fleet):
    fleet.device("lamp")
    owner = api_client(fleet.tenant)
    assert post(owner, SHADOW.format("lamp"), {"state": {"reported": {"t": 1}}}).status_code == 200
    other = tenant_services.tenant_create(f"ev{fleet.slug[2:]}")
    device_services.device_create(tenant=other, name="lamp")
    attacker = api_client(other)
    # Another tenant's token: its own `lamp` (none yet), never the victim's.
    assert attacker.get(SHADOW.format("lamp")).status_code == 404
    assert attacker.get(SHADOW.format("lamp") + "/history").json()["count"] == 0
    assert attacker.delete(SHADOW.format("lamp")).status_code == 404
    assert attacker.get(SHADOW.format("nosuch")).status_code == 404
    viewer = api_client(fleet.tenant, role="viewer")
    assert viewer.get(SHADOW.format("lamp")).json()["state"] == {"reported": {"t": 1}}
    assert post(viewer, SHADOW.format("lamp"), {"state": {"reported": {}}}).status_code == 403
    assert viewer.delete(SHADOW.format("lamp")).status_code == 403
    assert owner.get(SHADOW.format("lamp"))["ETag"] == '"1"'


def test_history_is_kept_for_the_plans_days(fleet):
    device = device_services.device_create(tenant=fleet.tenant, name="lamp")[0]
    for n in range(3):
        shadow_services.shadow_update(
            device=device,
            name="",
            payload=b'{"state":{"reported":{"n":%d}}}' % n,
            if_match=None,
            actor="test",
        )
    old = timezone.now() - timedelta(days=31)
    ShadowVersion.objects.filter(version__lte=2).update(created_at=old)
    assert shadow_services.shadow_history_purge() == 2  # the plan keeps 30 days
    tenant_services.tenant_set_quota(fleet.tenant, {"shadow_history_days": 60})
    shadow_services.shadow_update(
        device=device, name="", payload=b'{"state":{}}', if_match=None, actor="test"
    )
    ShadowVersion.objects.filter(version=3).update(created_at=old)
    assert shadow_services.shadow_history_purge() == 0  # this tenant keeps 60
    assert sorted(ShadowVersion.objects.values_list("version", flat=True)) == [3, 4]

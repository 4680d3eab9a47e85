"""Every stored byte capped (issue 44 point 4), from the attacker's side: a tenant creating named
shadows until `max_shadows` gets AWS's 403 error document on MQTT and a 403 naming the quota on
REST, with no row made for the refused shadow (not even an empty one) and the refusal counted
under its bounded limit name; writing updates keeps only `max_shadow_versions` past versions of
a shadow, whichever door they came through."""

from __future__ import annotations

import json
import time

import pytest

from data_plane.observability.journey_writer import KNOWN_CAUSES
from tenants.models import Shadow, ShadowVersion
from tenants.tenant import services as tenant_services
from tenants.usage.throttling_words import LIMITS
from tests.shadows.conftest import Watcher, api_client

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_new_shadows_past_max_shadows_are_refused_and_history_is_capped(tls_broker, fleet):
    tenant_services.tenant_set_quota(fleet.tenant, {"max_shadows": 2, "max_shadow_versions": 3})
    fleet.device("lamp")
    lamp = Watcher(tls_broker.port, fleet, "lamp")
    base = "$aws/things/lamp/shadow"
    try:
        for i in range(6):  # the classic shadow, six versions
            lamp.paho.publish(f"{base}/update", json.dumps({"state": {"reported": {"i": i}}}), 1)
            assert {t for t, _ in lamp.get(2)} == {
                f"{base}/update/accepted",
                f"{base}/update/documents",
            }
        lamp.paho.publish(f"{base}/name/a/update", b'{"state":{"reported":{"x":1}}}', 1)
        assert len(lamp.get(2)) == 2  # the second shadow: within the limit
        lamp.paho.publish(
            f"{base}/name/b/update", b'{"state":{"reported":{"x":1}},"clientToken":"t"}', 1
        )
        [(topic, body)] = lamp.get(1)
        assert topic == f"{base}/name/b/update/rejected"
        assert body["code"] == 403 and "max_shadows" in body["message"]
        assert body["clientToken"] == "t"
        assert not Shadow.objects.filter(tenant=fleet.tenant, name="b").exists()  # no row at all

        # The shadows it has still take updates; the history keeps the newest three of each.
        lamp.paho.publish(f"{base}/name/a/update", b'{"state":{"reported":{"x":2}}}', 1)
        assert len(lamp.get(2)) == 2
        classic = Shadow.objects.get(tenant=fleet.tenant, name="")
        versions = ShadowVersion.objects.filter(shadow=classic).order_by("version")
        assert [v.version for v in versions] == [4, 5, 6]

        # REST: the same limit, in the API's words, and a 403.
        owner = api_client(fleet.tenant)
        refused = owner.post(
            "/api/v1/devices/lamp/shadows/c",
            {"state": {"desired": {"on": True}}},
            format="json",
        )
        assert refused.status_code == 403, refused.content
        error = refused.json()["error"]
        assert error["code"] == "quota_exceeded" and "max_shadows" in error["message"]
        assert not Shadow.objects.filter(tenant=fleet.tenant, name="c").exists()
        for i in range(4):  # REST changes are versions too, capped the same way
            made = owner.post(
                "/api/v1/devices/lamp/shadow", {"state": {"desired": {"i": i}}}, format="json"
            )
            assert made.status_code == 200, made.content
        wait_for(
            lambda: ShadowVersion.objects.filter(shadow=classic, published_at=None).count() == 0
        )
        owner.post("/api/v1/devices/lamp/shadow", {"state": {"desired": {"i": 9}}}, format="json")
        assert ShadowVersion.objects.filter(shadow=classic).count() == 3
        # Deleting one makes room for another.
        assert owner.delete("/api/v1/devices/lamp/shadows/a").status_code == 200
        made = owner.post(
            "/api/v1/devices/lamp/shadows/c", {"state": {"desired": {"on": True}}}, format="json"
        )
        assert made.status_code == 200, made.content

    finally:
        lamp.close()


def test_the_refusals_are_counted_under_bounded_limit_names():
    """The broker counts a refused shadow or certificate as `quota_shadows` /
    `quota_certificates` (a usage minute's drops, a metric's label): names the quota page
    explains, each the plan key it enforces, and no label made from the request."""
    assert {"shadows", "certificates"} <= KNOWN_CAUSES
    assert LIMITS["shadows"].quota_key == "max_shadows"
    assert LIMITS["certificates"].quota_key == "max_certificates"


async def test_a_broker_without_a_database_keeps_the_same_limits():
    """The in-memory store (`--auth-file` brokers) refuses a shadow past `max_shadows` with the
    same 403, counts it, and keeps only the newest `max_shadow_versions` versions."""
    import asyncio

    from tests.shadows.test_service import FakeBroker, ask, service_and_meter

    class CountingBroker(FakeBroker):
        def __init__(self) -> None:
            super().__init__()
            self.exceeded: list[tuple[str, str]] = []

        def quota_exceeded(self, tenant: str, key: str, *, throttled: bool = False) -> None:
            self.exceeded.append((tenant, key))

    service, _, _, auth = service_and_meter()
    broker = CountingBroker()
    service.attach(broker)
    auth.quota = {"max_shadows": 1, "max_shadow_versions": 2}
    for i in range(4):
        ask(service, auth, "update", {"state": {"reported": {"i": i}}})
    ask(service, auth, "name/other/update", {"state": {"reported": {"i": 0}}})
    await asyncio.sleep(0.05)
    [refused] = [m for m in broker.published if m.topic.endswith("/rejected")]
    assert refused.topic == "$aws/things/lamp/shadow/name/other/update/rejected"
    assert json.loads(refused.payload)["code"] == 403
    assert broker.exceeded == [("acme", "shadows")]
    store = service.store
    assert ("acme", "lamp", "other") not in store.shadows
    assert [v for v, _, _ in store.history[("acme", "lamp", "")]] == [3, 4]

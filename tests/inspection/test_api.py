"""What the broker holds, through the REST API, against a real broker on Postgres with paho
clients (issue 30, point 4): sessions online and offline with their node, queue depth and in
flight; a session's subscriptions and queued messages with payload previews; retained messages
browsed and deleted by filter (a new subscriber no longer receives them); the topic tree; and
another tenant seeing none of it."""

from __future__ import annotations

import re

import pytest

from tenants.models import RetainedMessage
from tests.inspection.world import PAYLOADS, build_acme, json_of, tenant, until
from tests.tenancy.test_broker_tenancy import running_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def broker_port(monkeypatch, tmp_path):
    monkeypatch.setenv("MQTT_SESSION_FIGURES_INTERVAL", "0.3")
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())  # this test's own journey
    with running_pg_broker("--no-archive", "--journey-interval", "0.2") as port:
        yield port


@pytest.fixture
def acme(broker_port):
    made = tenant("acme", broker_port)
    build_acme(made)
    yield made
    made.close()


def test_a_tenant_sees_its_sessions_queues_retained_messages_and_topics(acme):
    api = acme.api
    page = json_of(api.get("/api/v1/sessions"))
    assert page["count"] == 4
    rows = {r["client_id"]: r for r in page["results"]}
    assert [r["client_id"] for r in page["results"]] == ["live-clean", "parked", "pub", "slow"]
    live, parked, slow = rows["live-clean"], rows["parked"], rows["slow"]
    assert live["online"] and live["clean_start"] and live["expiry"] == 0
    assert live["node"] and live["node"] == slow["node"]  # one broker holds both
    assert (live["subscription_count"], live["queued"], live["inflight"]) == (1, 0, 0)
    assert (slow["online"], slow["expiry"], slow["queued"], slow["inflight"]) == (True, 600, 3, 2)
    assert not parked["online"] and parked["node"] is None and parked["expiry"] == 3600
    assert parked["expires_at"] and (parked["queued"], parked["inflight"]) == (5, 0)
    assert [
        r["client_id"] for r in json_of(api.get("/api/v1/sessions?online=false"))["results"]
    ] == ["parked"]
    assert json_of(api.get("/api/v1/sessions?client=slo"))["count"] == 1

    detail = json_of(api.get("/api/v1/sessions/parked"))
    assert detail["persistent"] and not detail["online"]
    assert [(s["filter"], s["qos"]) for s in detail["subscriptions"]] == [("jobs/#", 1)]
    online = json_of(api.get("/api/v1/sessions/live-clean"))
    assert [(s["filter"], s["qos"]) for s in online["subscriptions"]] == [("sensors/+/temp", 0)]
    assert online["protocol_version"] == 5 and online["transport"] == "tcp"

    queue = json_of(api.get("/api/v1/sessions/parked/queue?limit=3"))
    assert queue["count"] == 5 and queue["next"]
    first, second, third = queue["results"]
    assert [q["seq"] for q in queue["results"]] == sorted(q["seq"] for q in queue["results"])
    assert (first["topic"], first["qos"], first["state"], first["size"]) == (
        "jobs/1",
        1,
        "queued",
        len(PAYLOADS[0]),
    )
    assert first["payload_encoding"] == "json"
    assert first["payload_preview"] == '{"job": 1, "name": "calibrate"}'
    assert (second["payload_encoding"], second["payload_preview"]) == ("text", "hello")
    assert (third["payload_encoding"], third["payload_preview"]) == (
        "hex",
        "00 01 02 03 04 05 06 07",
    )
    rest = json_of(api.get("/api/v1/sessions/parked/queue?limit=3&offset=3"))["results"]
    assert [q["payload_preview"] for q in rest] == ["4", "5"]
    assert json_of(api.get("/api/v1/sessions/live-clean/queue"))["count"] == 0  # memory only

    sensors = json_of(api.get("/api/v1/retained", {"topic": "sensors/+/temp"}))
    assert [
        (r["topic"], r["qos"], r["size"], r["payload_encoding"], r["payload_preview"])
        for r in sensors["results"]
    ] == [
        ("sensors/a/temp", 1, 11, "json", '{"t": 20.5}'),
        ("sensors/b/temp", 1, 6, "text", "21.5 C"),
    ]
    everything = json_of(api.get("/api/v1/retained"))["results"]
    assert [r["topic"] for r in everything] == ["config/x", "sensors/a/temp", "sensors/b/temp"]
    assert everything[0]["payload_preview"] == "00 01 ff"
    bad = api.get("/api/v1/retained", {"topic": "sensors/#/temp"})
    assert bad.status_code == 400
    assert bad.json()["error"]["message"] == "topic: '#' must be the last level and alone in it"
    assert api.delete("/api/v1/retained").status_code == 400  # deleting needs a filter
    for path, words in [
        ("/api/v1/retained?topic=" + "a/" * 600, "topic: a topic filter is at most 1024"),
        ("/api/v1/retained?topic=$share/g/a", "topic: a shared subscription"),
        ("/api/v1/topics?topic=a%00b", "topic: U+0000 in topic filter"),
        ("/api/v1/sessions?online=maybe", "online: Must be true or false"),
    ]:
        refused = api.get(path)
        assert refused.status_code == 400 and refused.json()["error"]["message"].startswith(words)
    assert api.get("/api/v1/sessions/a%00b").status_code == 404  # no such client id, no 500

    tree = json_of(api.get("/api/v1/topics"))
    roots = {n["name"]: n for n in tree["results"]}
    assert set(roots) == {"config", "jobs", "sensors"}
    assert roots["jobs"]["children"][0]["topic"] == "jobs/#"
    assert roots["jobs"]["children"][0]["subscriptions"] == 2  # slow and parked
    sensors_tree = {n["name"]: n for n in roots["sensors"]["children"]}
    assert sensors_tree["+"]["children"][0]["subscriptions"] == 1
    assert sensors_tree["a"]["children"][0]["retained"] is True
    # Rates from the journey: what was published on the topic in the last 5 minutes, per minute.
    assert sensors_tree["a"]["children"][0]["messages_per_minute"] == 0.2
    assert roots["jobs"]["children"][0]["messages_per_minute"] is None  # a filter

    # Delete by filter: gone from the table and from the broker, the rest kept.
    gone = api.delete("/api/v1/retained?topic=sensors/%23")
    assert json_of(gone) == {"topic": "sensors/#", "deleted": 2}
    assert list(RetainedMessage.objects.values_list("topic", flat=True)) == ["config/x"]

    def fresh_subscriber_gets() -> list[str]:
        late = acme.client("late")
        late.subscribe("#", 1)
        got = sorted(m.topic for m in late.expect(3, timeout=0.5))
        late.close()
        acme.clients.remove(late)
        return got

    assert until(lambda: fresh_subscriber_gets() == ["config/x"], within=5)
    one = api.delete("/api/v1/retained?topic=config/x")
    assert json_of(one)["deleted"] == 1
    assert until(lambda: fresh_subscriber_gets() == [], within=5)


def test_another_tenant_sees_none_of_it_by_id_or_wildcard(acme, broker_port):
    evil = tenant("evil", broker_port)
    try:
        # The attacker's own client with a client id acme uses, and a retained message.
        mine = evil.client("slow", clean=True, expiry=60)
        mine.publish("sensors/z/temp", b"mine", qos=1, retain=True)
        api = evil.api
        until(lambda: json_of(api.get("/api/v1/sessions"))["count"] == 1)
        [own] = json_of(api.get("/api/v1/sessions"))["results"]
        assert (own["client_id"], own["queued"], own["inflight"]) == ("slow", 0, 0)
        assert json_of(api.get("/api/v1/sessions/slow"))["subscriptions"] == []
        for client_id in ("parked", "live-clean", "pub"):
            for path in (f"/api/v1/sessions/{client_id}", f"/api/v1/sessions/{client_id}/queue"):
                response = api.get(path)
                assert response.status_code == 404, path
                assert client_id in response.json()["error"]["message"]
        assert json_of(api.get("/api/v1/sessions?client=park"))["count"] == 0
        assert json_of(api.get("/api/v1/sessions/slow/queue"))["count"] == 0
        until(lambda: json_of(api.get("/api/v1/retained"))["count"] == 1)
        for wildcard in ("#", "+/+/+", "sensors/#", "sensors/a/temp", "config/x"):
            topics = [
                r["topic"]
                for r in json_of(api.get("/api/v1/retained", {"topic": wildcard}))["results"]
            ]
            assert topics == (["sensors/z/temp"] if wildcard in ("#", "+/+/+", "sensors/#") else [])
        tree = json_of(api.get("/api/v1/topics"))
        assert [n["topic"] for n in tree["results"]] == ["sensors"]
        assert [n["topic"] for n in tree["results"][0]["children"]] == ["sensors/z"]
        # Deleting everything it can name deletes only its own.
        assert json_of(api.delete("/api/v1/retained?topic=%23"))["deleted"] == 1
        assert RetainedMessage.objects.filter(tenant__slug="acme").count() == 3
        late = acme.client("acme-late")
        late.subscribe("sensors/#", 1)
        assert sorted(m.topic for m in late.expect(2, timeout=3)) == [
            "sensors/a/temp",
            "sensors/b/temp",
        ]
        # And acme's own view is as it was.
        assert json_of(acme.api.get("/api/v1/sessions/slow"))["expiry"] == 600
    finally:
        evil.close()


def test_operators_see_each_tenant_from_their_overview_and_tenants_do_not(acme, broker_port):
    """Point 5: the operators' overview counts what the broker holds per tenant and links to
    that tenant's sessions, retained messages and topics (read-only); a tenant's own owner
    cannot open those pages for another tenant."""
    from django.contrib.auth import get_user_model
    from django.test import Client

    evil = tenant("evil", broker_port, password="pass-w0rd-evil")
    operator = get_user_model().objects.create_user(
        "ops@platform.io", "ops@platform.io", "pass-w0rd-ops", is_staff=True
    )
    ops = Client()
    ops.force_login(operator)
    page = ops.get("/operator/").content.decode()
    row = page[page.index('data-tenant="acme"') :]
    row = row[: row.index("</tr>")]
    cells = dict(re.findall(r'<td class="num ([a-z-]+)">(\d+)</td>', row))
    assert cells == {"connections": "3", "offline-sessions": "1", "queued": "10", "retained": "3"}
    # (queued: parked's five and slow's five durable copies, two of them in flight)
    assert 'href="/operator/tenants/acme/sessions/"' in row
    assert 'href="/operator/tenants/acme/retained/"' in row
    assert 'href="/operator/tenants/acme/topics/"' in row

    sessions = ops.get("/operator/tenants/acme/sessions/").content.decode()
    assert 'id="inspected-tenant">acme<' in sessions
    assert sessions.count('data-client-id="') == 4
    assert 'href="/operator/tenants/acme/sessions/parked/"' in sessions
    parked = ops.get("/operator/tenants/acme/sessions/parked/").content.decode()
    assert parked.count('<tr data-seq="') == 5
    retained = ops.get("/operator/tenants/acme/retained/").content.decode()
    assert retained.count('<tr data-topic="') == 3
    assert "retained-delete" not in retained and "Delete all" not in retained  # read-only
    topics = ops.get("/operator/tenants/acme/topics/").content.decode()
    assert 'data-topic="jobs/#"' in topics
    assert ops.get("/operator/tenants/nobody/sessions/").status_code == 404

    # The other tenant's owner, logged in to the portal: none of acme's pages.
    intruder = Client()
    intruder.post("/login/", {"email": "owner@evil.io", "password": "pass-w0rd-evil"})
    for path in (
        "/operator/",
        "/operator/tenants/acme/sessions/",
        "/operator/tenants/acme/sessions/parked/",
        "/operator/tenants/acme/retained/",
        "/operator/tenants/acme/topics/",
    ):
        assert intruder.get(path).status_code == 403, path
    assert intruder.get("/sessions/parked/").status_code == 404  # its own pages: its own only
    own = intruder.get("/retained/?topic=%23").content.decode()
    assert "sensors/a/temp" not in own and "config/x" not in own
    evil.close()

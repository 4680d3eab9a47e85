"""The portal's journey (issue 30, points 3 and 5): the Journey page's search and paging, a
device's events on its page, every dropped or refused counter linked to the rows behind it,
reason codes with their meaning, the operators' view of a tenant's journey, and another
tenant's member seeing none of it. Rows written by the broker's own recorder and writer into a
tmp object store (as tests/journey/test_journey_store.py), real Postgres, Django's client."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from html import unescape
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from common.mqtt.reason_codes import ReasonCode as RC
from common.stores.object_store import LocalObjectStore
from data_plane.observability.journey import DROP_CAUSES, JourneyRecorder
from data_plane.observability.journey_writer import JourneyWriter
from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.journey.display import code_meaning
from tenants.journey.links import cause_outcomes, limit_outcomes
from tenants.models import Usage
from tenants.portal import journey_views
from tenants.tenant import services as tenant_services
from tenants.usage.throttling_words import LIMITS

pytestmark = pytest.mark.django_db
PASSWORD = "a long passphrase"


@pytest.fixture(autouse=True)
def quick_passwords(settings):
    """No password is checked here (members log in with force_login): hash them cheaply."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    return LocalObjectStore(tmp_path)


@pytest.fixture
def acme(client, store):
    """acme (100 msg/s, 1 retained message) with device sensor-1 and a gateway whose client ids
    match gw-*, its owner logged in; rows of both tenants in the journey."""
    tenant, user, _ = account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    tenant_services.tenant_set_quota(tenant, {"max_publish_rate": 100, "max_retained_messages": 1})
    device_services.device_create(tenant=tenant, name="sensor-1")
    device_services.device_create(
        tenant=tenant, name="gateway", client_id_policy="pattern", client_id_pattern="gw-*"
    )
    account_services.signup(tenant="evil", email="me@evil.io", password=PASSWORD)
    recorder = JourneyRecorder("node-a")
    row = recorder.message
    row("acme", "sensor-1", "s/1/temp", 1, 11, "delivered", "", sessions=2, queued=1)
    row("acme", "sensor-1", "s/2/temp", 0, 11, "no_subscribers", "", sessions=0)
    row("acme", "sensor-1", "secret/x", 1, 2, "acl_denied", "not authorized", reason_code=0x87)
    row(
        "acme",
        "sensor-1",
        "s/3/temp",
        1,
        5,
        "quota_exceeded",
        "over the plan's max_publish_rate of 100 messages/s for 2 s",
        reason_code=RC.MESSAGE_RATE_TOO_HIGH,
        quota="publish_rate",
    )
    row("acme", "gw-7", "q/1", 1, 3, "queue_full", DROP_CAUSES["queue_full"][1], subscriber="s")
    row("acme", "gw-7", "q/2", 1, 3, "expired", DROP_CAUSES["expired"][1], subscriber="s")
    row("evil", "sensor-1", "s/1/temp", 1, 9, "queue_full", "evil's own", subscriber="x")
    event = recorder.client
    event("acme", "sensor-1", "connected", reason_code=0, detail="from 127.0.0.1, MQTT 5.0")
    event("acme", "sensor-1", "subscribed", detail="cmd/# (QoS 1)")
    event(
        "acme",
        "sensor-1",
        "disconnected",
        reason_code=RC.MESSAGE_RATE_TOO_HIGH,
        reason="0x96",
        initiator="server",
    )
    event("acme", "gw-7", "connect_failed", reason_code=0x86, reason="bad user name or password")
    event("evil", "sensor-1", "connect_failed", reason_code=0x86, reason="evil's own")
    JourneyWriter(recorder, store, writer_id="w1").write(*recorder.take())
    client.force_login(user)
    return tenant


def words(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html))).strip()


def rows(response) -> list[dict]:
    """The Journey table's rows as (outcome or event, topic, client, reason) from the markup."""
    assert response.status_code == 200
    body = response.content.decode()
    found = []
    for tr in re.findall(r"<tr data-(?:outcome|event)=.*?</tr>", body, re.S):
        kind = re.search(r'data-(?:outcome|event)="([^"]*)"', tr).group(1)
        topic = re.search(r'data-topic="([^"]*)"', tr)
        found.append(
            {
                "kind": kind,
                "topic": unescape(topic.group(1)) if topic else None,
                "client": unescape(re.search(r'data-client="([^"]*)"', tr).group(1)),
                "html": tr,
                "text": words(tr),
            }
        )
    return found


def test_search_by_topic_filter_and_outcome_chips_with_reasons_in_words(client, acme):
    every = rows(client.get("/journey/"))
    assert {r["topic"] for r in every} == {"s/1/temp", "s/2/temp", "secret/x", "s/3/temp"} | {
        "q/1",
        "q/2",
    }
    assert all("evil" not in r["text"] for r in every)

    narrowed = rows(client.get("/journey/", {"topic": "s/+/temp", "outcome": "delivered"}))
    assert [(r["kind"], r["topic"]) for r in narrowed] == [("delivered", "s/1/temp")]
    assert "delivered to 2 sessions (1 offline: kept in its queue)" in narrowed[0]["text"]
    # The chip ticked stays ticked; the filter stays in its field.
    body = client.get("/journey/", {"topic": "s/+/temp", "outcome": "delivered"}).content.decode()
    assert re.search(r'name="outcome" value="delivered" checked', body)
    assert not re.search(r'name="outcome" value="acl_denied" checked', body)
    assert 'value="s/+/temp"' in body

    # Linked chips (the API's comma form) and ticked ones (repeated) mean the same.
    linked = rows(client.get("/journey/?outcome=queue_full,expired"))
    ticked = rows(client.get("/journey/?outcome=queue_full&outcome=expired"))
    assert {r["topic"] for r in linked} == {r["topic"] for r in ticked} == {"q/1", "q/2"}
    assert any("queue was full" in row["text"] for row in linked[:2])

    # A reason code always comes with its meaning, a limit's with what the plan allows.
    rate = rows(client.get("/journey/", {"outcome": "quota_exceeded"}))[0]
    assert "0x96 Message rate too high: your plan allows 100 messages/s" in rate["text"]
    acl = rows(client.get("/journey/", {"outcome": "acl_denied"}))[0]
    assert "0x87 Not authorized" in acl["text"]
    # One time format: ISO-like, UTC, to the millisecond.
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC", every[0]["text"])


def test_a_client_id_of_a_device_links_to_its_page_and_timeline(client, acme):
    by_client = {r["client"]: r for r in rows(client.get("/journey/"))}
    assert 'href="/devices/sensor-1/?client=sensor-1#events"' in by_client["sensor-1"]["html"]
    # gw-7 is the gateway's (its pattern allows it).
    assert 'href="/devices/gateway/?client=gw-7#events"' in by_client["gw-7"]["html"]


def test_older_pages_follow_the_cursor_and_show_every_row_once(client, acme, monkeypatch):
    monkeypatch.setattr(journey_views, "PAGE_ROWS", 4)
    seen, url = [], "/journey/?topic=%23"
    for _ in range(5):
        response = client.get(url)
        seen += [(r["kind"], r["topic"]) for r in rows(response)]
        older = re.search(r'href="(\?[^"]*)" id="journey-older"', response.content.decode())
        if not older:
            break
        url = "/journey/" + unescape(older.group(1))
        assert parse_qs(urlsplit(url).query)["topic"] == ["#"]  # the filters stay
    assert len(seen) == 6 and len(set(seen)) == 6


def test_a_bad_filter_is_shown_as_an_error(client, acme):
    for query, said in [
        ({"topic": "a/#/b"}, "not a valid topic filter"),
        ({"outcome": "lost"}, "unknown outcome 'lost'"),
        ({"from": "yesterday"}, "from: expected an ISO 8601 time"),
        ({"from": "2026-11-27T10:00", "to": "2026-11-27T09:00"}, "`from` must be before `to`"),
        ({"cursor": "nonsense"}, "not a cursor"),
        ({"client": "x" * 300}, "client: at most 256 characters"),
    ]:
        response = client.get("/journey/", query)
        assert response.status_code == 200, query
        body = response.content.decode()
        error = re.search(r'<p class="flash error" role="alert" id="journey-error">(.*?)</p>', body)
        assert error and said in unescape(error.group(1)), query
        assert 'id="journey-rows"' not in body, query
        field = next(iter(query)) if "cursor" not in query else None
        if field in ("topic", "client", "from"):
            assert re.search(rf'name="{field}"[^>]*aria-invalid="true"', body), query


def test_a_device_page_shows_its_events_with_reasons_in_words(client, acme):
    body = client.get("/devices/sensor-1/").content.decode()
    section = re.search(r'<section id="events">.*?</section>', body, re.S).group(0)
    events = re.findall(r'<tr data-event="([^"]+)"', section)
    assert events == ["disconnected", "subscribed", "connected"]  # newest first
    text = words(section)
    assert "Message rate too high: the device published faster" in text
    assert "0x96 Message rate too high: your plan allows 100 messages/s" in text
    assert "server" in text and "cmd/# (QoS 1)" in text
    versions = [int(v) for v in re.findall(r'<td class="num version">(\d+)</td>', section)]
    assert versions == sorted(versions, reverse=True)
    assert 'href="/journey/?client=sensor-1"' in section  # the messages it published

    # The gateway's page: its client ids, chosen; one its pattern refuses is an error.
    gateway = client.get("/devices/gateway/", {"client": "gw-7"}).content.decode()
    assert re.findall(r'<tr data-event="([^"]+)"', gateway) == ["connect_failed"]
    assert "0x86 Bad user name or password" in words(gateway)
    refused = client.get("/devices/gateway/", {"client": "sensor-1"}).content.decode()
    assert 'id="events-error"' in refused and "<tr data-event=" not in refused


def test_client_events_page_lists_every_clients_events(client, acme):
    failed = rows(client.get("/journey/clients/", {"event": "connect_failed"}))
    assert [(r["kind"], r["client"]) for r in failed] == [("connect_failed", "gw-7")]
    assert "0x86 Bad user name or password" in failed[0]["text"]
    assert len(rows(client.get("/journey/clients/"))) == 4
    bad = client.get("/journey/clients/", {"event": "exploded"}).content.decode()
    assert 'id="journey-error"' in bad


def test_every_dropped_or_refused_counter_links_to_the_rows_behind_it(client, acme):
    Usage.objects.create(
        tenant=acme,
        minute=timezone.now().replace(second=0, microsecond=0) - timedelta(minutes=2),
        dropped={"queue_full": 1, "expired": 1, "quota_publish_rate": 1, "quota_connections": 1},
        throttled={"publish_rate": 3},
    )
    dashboard = client.get("/").content.decode()
    drops = re.search(r'<p id="messages-dropped">.*?</p>', dashboard, re.S).group(0)
    links = dict(re.findall(r'href="([^"]+)"[^>]*>([^<]+)</a>', drops))
    by_text = {unescape(text): unescape(href) for href, text in links.items()}
    assert by_text["queue full 1"] == "/journey/?outcome=queue_full"
    assert by_text["refused over the publish rate 1"] == "/journey/?outcome=quota_exceeded"
    total = re.search(r'<a class="count" href="([^"]+)"', drops).group(1)
    # Landing: the rows behind the figure, and only those.
    landed = rows(client.get(unescape(by_text["queue full 1"])))
    assert [(r["kind"], r["topic"]) for r in landed] == [("queue_full", "q/1")]
    assert {r["kind"] for r in rows(client.get(unescape(total)))} == {
        "acl_denied",
        "quota_exceeded",
        "queue_full",
        "expired",
    }
    refused = re.search(r'<p id="refused-other">.*?</p>', dashboard, re.S).group(0)
    assert 'href="/journey/clients/?event=connect_failed"' in refused
    assert 'data-sys="messages/dropped"' in re.search(
        r'<a href="[^"]+" id="sys-dropped"[^>]*>', dashboard
    ).group(0)

    quota = client.get("/quota/").content.decode()
    card = re.search(
        r'<section class="card throttle" data-limit="publish_rate">.*?</section>', quota, re.S
    )
    assert 'href="/journey/?outcome=quota_exceeded"' in card.group(0)


def test_causes_map_onto_the_outcomes_the_broker_records():
    for cause, (outcome, _) in DROP_CAUSES.items():
        assert cause_outcomes(cause) == (outcome,), cause
    assert cause_outcomes("quota_message_size") == ("too_large",)
    for limit, words_ in LIMITS.items():
        assert bool(limit_outcomes(limit)) == words_.refuses_messages, limit


def test_codes_with_their_meaning():
    limits = {"max_publish_rate": 100, "max_device_publish_rate": 0, "max_message_size": 200}
    assert (
        code_meaning(0x96, limits) == "0x96 Message rate too high: your plan allows 100 messages/s"
    )
    assert (
        code_meaning(0x95, limits)
        == "0x95 Packet too large: your plan allows messages up to 200 bytes"
    )
    assert code_meaning(0x97, {"max_retained_messages": 1}, "retained") == (
        "0x97 Quota exceeded: your plan allows 1 retained message"
    )
    assert code_meaning(0x87, limits) == "0x87 Not authorized"
    assert code_meaning(None, limits) == ""


def test_another_tenants_member_sees_none_of_it(client, acme):
    client.logout()
    intruder = get_user_model().objects.get(email="me@evil.io")
    client.force_login(intruder)
    mine = rows(client.get("/journey/", {"topic": "#"}))
    assert [(r["kind"], r["topic"]) for r in mine] == [("queue_full", "s/1/temp")]
    assert "evil's own" in mine[0]["text"]
    assert rows(client.get("/journey/", {"client": "gw-7"})) == []
    assert rows(client.get("/journey/clients/", {"client": "gw-7"})) == []
    assert client.get("/devices/sensor-1/").status_code == 404  # acme's device: not evil's
    # The operators' view of acme: not for a tenant's member.
    assert client.get("/operator/tenants/acme/journey/").status_code == 403
    assert client.get("/operator/tenants/acme/journey/clients/").status_code == 403


def test_an_operator_sees_a_tenants_journey_from_the_overview(client, acme):
    operator = get_user_model().objects.create_user(
        "ops@platform.io", "ops@platform.io", PASSWORD, is_staff=True
    )
    client.force_login(operator)
    overview = client.get("/operator/").content.decode()
    row = re.search(r'<tr data-tenant="acme">.*?</tr>', overview, re.S).group(0)
    link = re.search(r'href="(/operator/tenants/acme/journey/)"', row).group(1)
    seen = rows(client.get(link, {"outcome": "queue_full"}))
    assert [r["topic"] for r in seen] == ["q/1"]  # acme's, not evil's
    assert '<a href="/devices/' not in seen[0]["html"]  # a tenant's device pages are its own
    events = rows(client.get("/operator/tenants/acme/journey/clients/"))
    assert len(events) == 4
    assert client.get("/operator/tenants/nobody/journey/").status_code == 404


def test_the_mqtt_client_page_knows_each_codes_meaning(client, acme):
    """The browser client shows a refused subscription's or a DISCONNECT's code in words."""
    body = client.get("/client/").content.decode()
    data = re.search(r'<script id="reason-codes" type="application/json">(.*?)</script>', body)
    meanings = json.loads(data.group(1))
    assert meanings[str(0x96)] == "0x96 Message rate too high: your plan allows 100 messages/s"
    assert meanings[str(0x87)] == "0x87 Not authorized"


def test_the_device_page_works_when_the_journey_cannot_be_read(client, acme, monkeypatch):
    def unreadable(*args, **kwargs):
        raise OSError("object store unreachable")

    monkeypatch.setattr("tenants.journey.selectors.JourneyReader.client_events", unreadable)
    response = client.get("/devices/sensor-1/")
    assert response.status_code == 200
    assert "could not be read just now" in words(response.content.decode())

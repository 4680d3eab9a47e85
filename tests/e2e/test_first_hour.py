"""A new tenant's first hour on the running platform: sign-up and the address confirmation in the
portal, devices through the REST API, paho clients publishing and subscribing, then what the
tenant looks at to understand its traffic: the journey of each message (with each outcome),
its clients' lives, sessions and retained messages, the ACL tester and a rule's dry run."""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest

from tests.broker.clients import Paho
from tests.e2e.conftest import Platform, eventually

pytestmark = pytest.mark.e2e
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop


def rows(answer) -> list[dict[str, Any]]:
    assert answer.status_code == 200, answer.text
    body = answer.json()
    return body["results"] if isinstance(body, dict) else body


@pytest.mark.browser
def test_sign_up_in_the_portal_and_confirm_the_address(platform: Platform, page):
    email, password = "portal-owner@e2e-portal.io", "a long portal passphrase"
    page.goto(platform.url("/signup/"))
    page.fill("input[name=tenant]", "e2e-portal")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(platform.url("/"))
    assert email in page.locator("[data-email-unverified]").inner_text()
    link = platform.mail_link(email, "/account/verify/")  # printed by the web process
    page.goto(link)
    page.wait_for_load_state()
    assert f"{email} is confirmed" in page.inner_text("main")
    assert page.locator("[data-email-unverified]").count() == 0
    # The same account on the API: a token for its password.
    answer = platform.api().post("/api/v1/auth/token", {"email": email, "password": password})
    assert answer.status_code == 200, answer.text
    me = platform.api(answer.json()["token"]).get("/api/v1/tenant")
    assert me.status_code == 200 and me.json()["slug"] == "e2e-portal", me.text


def test_devices_messages_and_the_journey_of_each(platform: Platform, tenant: dict[str, Any]):
    api, slug = tenant["api"], tenant["slug"]
    made = api.post("/api/v1/devices", {"name": "d", "client_id_policy": "any"})
    assert made.status_code == 201, made.text
    secret = made.json()["password"]
    assert made.json()["username"] == f"{slug}/d"
    # The operator's command beside the running platform (the plan's limits, made small).
    quota = platform.manage(
        "set_quota",
        slug,
        "max_message_size=200",
        "max_retained_messages=1",
        "max_queued_messages=2",
    )
    assert quota.returncode == 0, quota.stderr
    denied = api.post(
        "/api/v1/acls", {"action": "publish", "permission": "deny", "topic": "secret/#"}
    )
    assert denied.status_code == 201, denied.text
    port, user = platform.port("MQTT_PORT"), f"{slug}/d"
    time.sleep(1.5)  # the broker hears of the changes by NOTIFY; give it a moment

    watcher = Paho(port, user, secret, "watcher")
    watcher.subscribe("live/#", 1)
    sleeper = Paho(port, user, secret, "sleeper", clean=False, expiry=300)
    sleeper.subscribe("q/#", 1)
    sleeper.close()
    intruder = Paho(port, user, "not-the-secret", "intruder")
    assert intruder.reason_code == 0x86
    intruder.stop_loop()
    pub = Paho(port, user, secret, "pub")
    pub.publish("live/1", json.dumps({"temp": 21.5}), 1)
    got = watcher.expect(1, 5)
    assert [(m.topic, json.loads(m.payload)) for m in got] == [("live/1", {"temp": 21.5})]
    pub.publish("nobody/1", b"{}", 1)
    pub.publish("secret/x", b"{}", 1)
    pub.publish("r/1", b"a", 1, retain=True)
    pub.publish("r/2", b"b", 1, retain=True)  # over max_retained_messages
    for n in range(3):  # the offline queue holds 2: q/2 finds it full
        pub.publish(f"q/{n}", b"{}", 1)
    pub.publish("live/big", b"x" * 500, 1)  # over max_message_size: the connection ends
    assert pub.disconnected.wait(5)
    pub.stop_loop()
    sleeper = Paho(port, user, secret, "sleeper", clean=False, expiry=300)
    assert [m.topic for m in sleeper.expect(2, 5)] == ["q/0", "q/1"]

    def journey() -> list[dict[str, Any]]:
        return rows(api.get("/api/v1/journey"))

    found = eventually(journey, lambda r: len({(x["topic"], x["outcome"]) for x in r}) >= 8)
    by = {(r["topic"], r["outcome"]): r for r in found}
    assert by[("live/1", "delivered")]["sessions"] == 1
    assert by[("nobody/1", "no_subscribers")]["sessions"] == 0
    assert by[("secret/x", "acl_denied")]["reason_code_text"] == "0x87 Not authorized"
    assert by[("r/2", "quota_exceeded")]["quota"] == "retained"
    assert by[("q/2", "queue_full")]["subscriber"] == "sleeper"
    assert by[("live/big", "too_large")]["size"] == 500
    for row in found:  # words for a person, never a bare token
        assert row["reason"] and " " in row["reason"], row

    # The clients' lives: the intruder's refusal, the publisher's end, in words.
    def events(client: str) -> list[dict[str, Any]]:
        return rows(api.get(f"/api/v1/clients/{client}/events"))

    pub_events = eventually(
        lambda: events("pub"), lambda r: {"connected", "disconnected"} <= {e["event"] for e in r}
    )
    ended = [e for e in pub_events if e["event"] == "disconnected"][0]
    assert "max_message_size" in ended["reason"] or "too large" in ended["reason"].lower(), ended
    refused = eventually(lambda: events("intruder"), lambda r: bool(r))
    assert refused[0]["event"] == "connect_failed" and refused[0]["reason_code"] == 0x86

    # Sessions and retained messages, as the inspection API shows them.
    def sessions() -> dict[str, dict[str, Any]]:
        return {s["client_id"]: s for s in rows(api.get("/api/v1/sessions"))}

    eventually(sessions, lambda s: s["sleeper"]["online"] and s["watcher"]["online"])
    detail = api.get("/api/v1/sessions/sleeper").json()
    assert [s["filter"] for s in detail["subscriptions"]] == ["q/#"], detail
    retained = rows(api.get("/api/v1/retained", params={"topic": "r/#"}))
    assert [(r["topic"], r["payload_preview"]) for r in retained] == [("r/1", "a")]
    assert api.delete("/api/v1/retained", params={"topic": "r/1"}).status_code in (200, 204)
    eventually(lambda: rows(api.get("/api/v1/retained", params={"topic": "r/#"})), lambda r: not r)
    for client in (watcher, sleeper):
        client.close()


def test_the_acl_tester_and_a_rules_dry_run(tenant: dict[str, Any]):
    api = tenant["api"]
    api.post("/api/v1/devices", {"name": "tester"})
    denied = api.post(
        "/api/v1/acls", {"action": "publish", "permission": "deny", "topic": "vault/#"}
    )
    assert denied.status_code == 201, denied.text
    answer = api.post(
        "/api/v1/acls/test", {"device": "tester", "action": "publish", "topic": "vault/door"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["allowed"] is False and answer.json()["rule"]["topic"] == "vault/#"
    dry = api.post(
        "/api/v1/rules/test",
        {
            "sql": 'SELECT payload.temp AS t FROM "live/#" WHERE payload.temp > 20',
            "context": {"topic": "live/1", "payload": '{"temp": 21.5}', "clientid": "d"},
        },
    )
    assert dry.status_code == 200, dry.text
    assert dry.json() == {"match": True, "outputs": [{"t": 21.5}]} or (
        dry.json()["match"] and dry.json()["outputs"][0]["t"] == 21.5
    )
    wrong = api.post("/api/v1/rules/test", {"sql": "SELEC nothing", "context": {}})
    assert wrong.status_code == 400 and wrong.json()["error"]["message"], wrong.text

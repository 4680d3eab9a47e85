"""The journey in headless Chromium against the broker as operators run it (runbroker on Postgres,
its journey written every 0.2 s, paho clients): the dashboard's "queue full" figure leads to the
very message lost; the Journey page narrows by topic filter and an outcome chip and shows a bad
filter as an error; a device's page shows its client's life; another tenant's member finds none
of it, `#` included (issue 30, point 3)."""

from __future__ import annotations

import os

import pytest

from tenants.accounts import services as account_services
from tenants.acls import services as acl_services
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.portal.web import log_in
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop
PASSWORD = "a long passphrase"


@pytest.fixture
def acme_traffic(tmp_path, monkeypatch, settings):
    """acme's devices publish: delivered, nobody subscribed, refused by the ACL, and one message
    lost at an offline subscriber whose queue holds one. The broker stops at the end (writing
    the journey and the minute's usage), as the figures would be a minute later."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    tenant, _, _ = account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    tenant_services.tenant_set_quota(tenant, {"max_queued_messages": 1})
    acl_services.acl_add(tenant=tenant, action="publish", permission="deny", topic="secret/#")
    secrets = {
        n: device_services.device_create(tenant=tenant, name=n)[1] for n in ("sensor-1", "sleeper")
    }
    account_services.signup(tenant="evil", email="me@evil.io", password=PASSWORD)

    broker, port = start_pg_broker(
        "--no-archive", "--journey-interval", "0.2", "--usage-flush-interval", "1"
    )
    try:
        sleeper = Paho(port, "acme/sleeper", secrets["sleeper"], "sleeper", clean=False, expiry=300)
        sleeper.subscribe("q/#", 1)
        sleeper.close()
        pub = Paho(port, "acme/sensor-1", secrets["sensor-1"], "sensor-1")
        pub.subscribe("live/#", 1)
        pub.publish("live/1", b'{"t": 21.5}', 1)
        pub.publish("nobody/1", b"{}", 1)
        pub.publish("secret/x", b"{}", 1)
        for n in range(2):  # the queue holds one: q/1 finds it full
            pub.publish(f"q/{n}", b"{}", 1)
        pub.expect(1)  # live/1 came back: everything before it was routed
        pub.close()
    finally:
        broker.terminate()
        assert broker.wait(timeout=15) == 0


def shown_rows(page) -> list[tuple[str, str]]:
    return [
        (row.get_attribute("data-outcome"), row.get_attribute("data-topic"))
        for row in page.locator("#journey-rows tbody tr[data-outcome]").all()
    ]


def test_search_timeline_and_a_dropped_counters_link(live_server, acme_traffic, page, artifacts):
    url = live_server.url
    log_in(page, url, "me@acme.io", PASSWORD)

    # The dashboard's drop: its cause links to the journey rows behind it.
    cause = page.locator('#messages-dropped a.cause[data-cause="queue_full"]')
    assert cause.inner_text() == "queue full 1"
    cause.click()
    page.wait_for_url("**/journey/?outcome=queue_full")
    assert shown_rows(page) == [("queue_full", "q/1")]
    assert page.locator('#journey-chips input[value="queue_full"]').is_checked()
    row = page.locator("#journey-rows tbody tr").first
    assert "dropped as it arrived at subscriber sleeper: the subscriber's queue was full" in (
        row.inner_text()
    )
    assert "subscriber sleeper" in row.inner_text()
    page.screenshot(path=str(artifacts / "journey-queue-full.png"), full_page=True)

    # The search: a topic filter and an outcome chip narrow the rows.
    page.click("#journey-clear")
    page.wait_for_selector("#journey-rows")
    assert {topic for _, topic in shown_rows(page)} == {
        "live/1",
        "nobody/1",
        "secret/x",
        "q/0",
        "q/1",
    }
    page.fill("input[name=topic]", "live/#")
    page.click("#journey-chips label.outcome-delivered")
    page.click("#journey-form button[type=submit]")
    page.wait_for_url("**/journey/?topic=live%2F%23*outcome=delivered*")
    assert shown_rows(page) == [("delivered", "live/1")]
    assert "delivered to 1 session" in page.locator("#journey-rows tbody tr").first.inner_text()
    page.fill("input[name=topic]", "")
    page.click("#journey-chips label.outcome-delivered")  # off again
    page.click("#journey-chips label.outcome-acl_denied")
    page.click("#journey-form button[type=submit]")
    page.wait_for_url("**outcome=acl_denied*")
    assert shown_rows(page) == [("acl_denied", "secret/x")]
    assert "0x87 Not authorized" in page.locator("#journey-rows tbody tr").first.inner_text()

    # A bad filter is an error, styled as one (not a green banner), and shows no rows.
    page.fill("input[name=topic]", "a/#/b")
    page.click("#journey-form button[type=submit]")
    error = page.locator("#journey-error")
    assert "not a valid topic filter" in error.inner_text()
    background = error.evaluate("e => getComputedStyle(e).backgroundColor")
    assert background == "rgb(253, 236, 234)", background
    assert page.locator("#journey-rows").count() == 0

    # The publisher's client id leads to its device's page: its life, newest first.
    page.goto(f"{url}/journey/?outcome=no_subscribers")
    page.click("#journey-rows td.client a")
    page.wait_for_selector("#device-events")
    events = [r.get_attribute("data-event") for r in page.locator("#device-events tbody tr").all()]
    assert events == ["disconnected", "subscribed", "connected"]
    assert (
        "live/# (QoS 1)" in page.locator('#device-events tr[data-event="subscribed"]').inner_text()
    )
    said = page.locator('#device-events tr[data-event="disconnected"]').inner_text()
    assert "Normal disconnection" in said and "client" in said
    page.screenshot(path=str(artifacts / "journey-device-events.png"), full_page=True)

    # The attacker's side: another tenant's member, every topic, acme's client id.
    page.click("text=Log out")
    log_in(page, url, "me@evil.io", PASSWORD)
    for query in ("topic=%23", "client=sensor-1", "outcome=queue_full"):
        page.goto(f"{url}/journey/?{query}")
        assert page.locator("#journey-empty").count() == 1, query
    page.goto(f"{url}/journey/clients/?client=sleeper")
    assert page.locator("#journey-empty").count() == 1

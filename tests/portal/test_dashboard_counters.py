"""Numbers that are true: the dashboard's "Messages in/out" count the tenant's application
messages (PUBLISH received from its devices and what its rules republish, deliveries sent to
them) — never the platform's own (the portal's live views, `$SYS`, `$events`) — and agree with the usage API for the same minutes; the retained count is the tenant's retained
messages, not its `$SYS` topics. Real broker and portal processes, paho clients, Chromium."""

from __future__ import annotations

import json
import time
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from common.security import service_token
from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tests.broker.clients import Paho
from tests.portal.web import running_portal
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
KEY = "dashboard-counters-test-key"


@pytest.fixture
def platform(monkeypatch):
    monkeypatch.setenv("MQTT_SERVICE_KEY", KEY)
    broker, mqtt_port = start_pg_broker(
        "--sys-interval", "0.5", "--usage-flush-interval", "1", "--no-archive"
    )
    with running_portal(mqtt_port) as url:
        yield url, mqtt_port, broker
    broker.terminate()
    broker.wait(timeout=10)


@pytest.fixture
def accounts():
    acme, _, token = account_services.signup(
        tenant="acme", email="ops@acme.io", password="a long pass"
    )
    _, publisher = device_services.device_create(tenant=acme, name="sensor-1")
    _, subscriber = device_services.device_create(tenant=acme, name="sensor-2")
    return token, publisher, subscriber


def usage_minutes(url: str, token: str, since: datetime) -> list[dict]:
    request = urllib.request.Request(
        f"{url}/api/v1/usage?since={since.isoformat().replace('+00:00', 'Z')}&limit=500",
        headers={"Authorization": f"Bearer {token}"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.load(response)["results"]


def counter(page, name: str) -> str:
    return page.locator(f'[data-sys="{name}"]').text_content()


def test_dashboard_counts_application_messages_and_agrees_with_usage(platform, accounts, page):
    url, mqtt_port, broker = platform
    token, publisher_secret, subscriber_secret = accounts
    started = datetime.now(UTC) - timedelta(minutes=1)

    page.goto(f"{url}/login/")
    page.fill("input[name=email]", "ops@acme.io")
    page.fill("input[name=password]", "a long pass")
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/")
    # A second tab watches the same topics in the Live viewer: the portal's own identity
    # receives every message too, and must not count.
    live = page.context.new_page()
    live.goto(f"{url}/live/")
    live.fill("#watch-filter", "sensors/#")
    live.click("text=Watch")
    live.wait_for_selector("#watch-state:has-text('Watching sensors/#')")
    page.wait_for_selector("#live-status.on")

    subscriber = Paho(mqtt_port, "acme/sensor-2", subscriber_secret, "sensor-2")
    subscriber.subscribe("sensors/#", 1)
    device = Paho(mqtt_port, "acme/sensor-1", publisher_secret, "sensor-1")
    for n in range(10):
        device.publish("sensors/t", f"reading {n}", 1)
    device.publish("sensors/state/a", "on", 1, retain=True)
    device.publish("sensors/state/b", "off", 1, retain=True)
    # The rules' republish identity publishes too: the tenant's traffic (its rules' outputs).
    rules_id = service_token.new_client_id(service_token.RULES_DEVICE)
    rules = Paho(
        mqtt_port,
        f"acme/{service_token.RULES_DEVICE}",
        service_token.sign(KEY.encode(), "acme", rules_id),
        rules_id,
    )
    assert rules.reason_code == 0
    for n in range(3):
        rules.publish("sensors/alert", f"rule output {n}", 1)
    assert len(subscriber.expect(15)) == 15  # 12 from the device, 3 from the rules
    live.wait_for_selector("#live-messages tr.live-message:has-text('rule output 2')")

    # 15 PUBLISH in (the devices' 12, the rules' 3); 15 deliveries to sensor-2 (every copy to
    # the portal's viewer aside); 2 retained messages (the $SYS topics aside).
    page.wait_for_function(
        "() => document.querySelector('[data-sys=\"messages/received\"]').textContent === '15'"
        " && document.querySelector('[data-sys=\"messages/sent\"]').textContent === '15'",
        timeout=15000,
    )
    time.sleep(1.5)  # several $SYS rounds later, still the same: nothing else creeps in
    assert counter(page, "messages/received") == "15"
    assert counter(page, "messages/sent") == "15"
    assert counter(page, "retained messages/count") == "2"
    assert counter(page, "clients/connected") == "2"  # the devices; not the portal, not rules

    for client in (device, subscriber, rules):
        client.close()
    # The broker writes a minute of usage once the minute is over, and the current one when it
    # stops (as at a deploy): stop it rather than wait up to a minute.
    broker.terminate()
    assert broker.wait(timeout=20) == 0
    minutes = usage_minutes(url, token, started)
    totals = (sum(m["messages_in"] for m in minutes), sum(m["messages_out"] for m in minutes))
    assert totals == (15, 15), minutes
    assert max(m["retained_count"] for m in minutes) == 2

"""Throttling and drops as a tenant sees them in headless Chromium, against the portal under
Daphne beside a real broker on Postgres: the quota page's Throttling section, the dashboard's
drops, the device page's last disconnect reason in words (issue 28, point 3).

The figures come through the broker's own metering: `UsageMeter` counts slowdowns and drops and
its flush upserts them into `tenants_usage`, as a broker does every few seconds.
`test_a_paho_publisher_over_the_rate_is_shown_slowed_not_dropped` drives it from the outside, a
paho client publishing over a low `max_publish_rate`; it waits for the broker's new limiter, the
first to emit `quota.throttled` (until then a paused 3.1.1 publisher is metered as refusals)."""

from __future__ import annotations

import asyncio
import os
import re
import threading

import paho.mqtt.client as mqtt
import psycopg
import pytest
from django.db import connection
from django.utils import timezone
from paho.mqtt.enums import CallbackAPIVersion

from data_plane.tenancy.metering import UsageMeter
from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.models import Device
from tenants.tenant import services as tenant_services
from tests.portal.web import log_in, running_portal
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop
KEY = "throttling-browser-test-key"
PASSWORD = "a long passphrase"


@pytest.fixture
def platform(monkeypatch):
    """The broker (usage flushed every second) and the portal; yields (url, mqtt port, broker)."""
    monkeypatch.setenv("MQTT_SERVICE_KEY", KEY)
    broker, mqtt_port = start_pg_broker(
        "--sys-interval", "0.5", "--usage-flush-interval", "1", "--no-archive"
    )
    with running_portal(mqtt_port) as url:
        yield url, mqtt_port, broker
    broker.terminate()
    broker.wait(timeout=10)


def acme(publish_rate: int) -> str:
    """Tenant acme at `publish_rate` msg/s with device sensor-1; returns the device's secret."""
    tenant, _, _ = account_services.signup(tenant="acme", email="ops@acme.io", password=PASSWORD)
    tenant_services.tenant_set_quota(tenant, {"max_publish_rate": publish_rate})
    _, secret = device_services.device_create(tenant=tenant, name="sensor-1")
    return secret


def flush(meter: UsageMeter) -> None:
    """The meter's flush into the test database, as the broker's observers run it (in a thread
    of its own: Playwright's sync API owns this one's event loop)."""
    p = connection.get_connection_params()
    dsn = f"host={p['host']} port={p['port']} user={p['user']} dbname={p['dbname']}"

    async def run() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            assert await meter.flush(conn, final=True) == 1

    failure: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(run())
        except BaseException as exc:  # handed to the test
            failure.append(exc)

    worker = threading.Thread(target=target)
    worker.start()
    worker.join(30)
    assert not failure, failure


def shown(page, selector: str) -> str:
    return re.sub(r"\s+", " ", page.locator(selector).inner_text()).strip()


def watch_console(page) -> list[str]:
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    return problems


@pytest.fixture
def metered() -> set[str]:
    """acme at 100 msg/s, its device last cut off for its rate (0x96), and a minute of usage
    metered and flushed as a broker does: 1,234 publishes slowed by the publish rate, 12
    refused by it, 10 copies dropped for a full queue, 2 messages too large. Made before the
    browser starts (Playwright's sync API and Django's connections). Returns the minute it was
    metered in, as the page shows it (two when the minute turned meanwhile)."""
    acme(publish_rate=100)
    Device.objects.filter(name="sensor-1").update(
        last_disconnect_reason="0x96", last_disconnected_at=timezone.now()
    )
    before = timezone.localtime().strftime("%H:%M")
    meter = UsageMeter()
    for _ in range(1234):  # what the observers do on each quota.throttled(acme, publish_rate)
        meter.throttled("acme", "publish_rate")
    meter.dropped("acme", "quota_publish_rate", 12)
    meter.dropped("acme", "queue_full", 10)
    meter.dropped("acme", "quota_message_size", 2)
    flush(meter)
    return {before, timezone.localtime().strftime("%H:%M")}


def test_quota_page_dashboard_and_device_page_explain_what_the_limits_did(
    platform, metered, page, artifacts
):
    url, _, _ = platform
    problems = watch_console(page)
    log_in(page, url, "ops@acme.io", PASSWORD)
    dropped = shown(page, "#messages-dropped")
    assert dropped == (
        "Messages dropped in the last 24 hours: 24 — refused over the publish rate 12, "
        "queue full 10, message too large 2"
    )
    slowed = shown(page, "#slowed")
    assert slowed.startswith(
        "Slowed by a limit in the last 24 hours, not dropped: "
        "Publish rate (100 messages/s): 1,234 times."
    )
    page.screenshot(path=str(artifacts / "throttling-dashboard.png"), full_page=True)

    page.click("#slowed a")  # "What it means →"
    page.wait_for_selector("#throttling")
    card = 'section.throttle[data-limit="publish_rate"]'
    assert shown(page, f"{card} h3") == "Publish rate (100 messages/s) max_publish_rate"
    hour = shown(page, f'{card} li[data-period="last_hour"]')
    said = re.fullmatch(
        r"Slowed 1,234 times / refused 12 times in the last hour \(last at (\d\d:\d\d) UTC\)",
        hour,
    )
    assert said and said.group(1) in metered, hour
    assert "Nothing was lost" in shown(page, card)
    assert "max_device_publish_rate" in shown(page, f"{card} .advice")
    message_size = shown(page, 'section.throttle[data-limit="message_size"]')
    assert "Refused twice in the last hour" in message_size
    device_row = shown(page, 'tr[data-quota="max_device_publish_rate"]')
    assert "no per-device limit: devices share the tenant's rate fairly" in device_row
    page.screenshot(path=str(artifacts / "throttling-quota.png"), full_page=True)

    page.goto(f"{url}/devices/sensor-1/")
    page.screenshot(path=str(artifacts / "throttling-device.png"), full_page=True)
    reason = shown(page, "#last-disconnect")
    assert reason.startswith(
        "Message rate too high: the device published faster than the plan allows for too long"
    )
    assert shown(page, "#last-disconnect .reason-code").startswith("0x96 · at ")
    page.click("#last-disconnect a")  # "Throttling →": what the rate did, on the quota page
    page.wait_for_selector('section.throttle[data-limit="publish_rate"]')
    assert not [p for p in problems if "Content Security Policy" in p], problems


@pytest.fixture
def slow_plan() -> str:
    """acme at 20 msg/s (made before the browser starts); the device's secret."""
    return acme(publish_rate=20)


def test_a_paho_publisher_over_the_rate_is_shown_slowed_not_dropped(platform, slow_plan, page):
    """A device on paho's defaults (MQTT 3.1.1, 20 in flight, QoS 1) publishes 50 messages at
    once over a 20 msg/s plan: the broker slows it (all acknowledged, none refused), and once
    the broker has written its usage (a stop flushes the current minute) the quota page says
    the publish rate slowed it and the dashboard drops nothing."""
    url, mqtt_port, broker = platform
    secret = slow_plan
    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="sensor-1")
    client.username_pw_set("acme/sensor-1", secret)
    client.connect("127.0.0.1", mqtt_port)
    client.loop_start()
    try:
        sent = [client.publish("sensors/t", f"reading {n}", qos=1) for n in range(50)]
        for info in sent:
            info.wait_for_publish(timeout=30)
        assert all(info.is_published() for info in sent)
        assert all(info.rc == mqtt.MQTT_ERR_SUCCESS for info in sent)
    finally:
        client.disconnect()
        client.loop_stop()
    broker.terminate()  # a broker that stops writes the current minute's usage too
    assert broker.wait(timeout=15) == 0

    log_in(page, url, "ops@acme.io", PASSWORD)
    assert shown(page, "#messages-dropped") == "Messages dropped in the last 24 hours: 0"
    assert "Publish rate (20 messages/s)" in shown(page, "#slowed")
    page.goto(f"{url}/quota/#throttling")
    card = 'section.throttle[data-limit="publish_rate"]'
    hour = shown(page, f'{card} li[data-period="last_hour"]')
    pattern = r"Slowed (once|twice|[\d,]+ times) in the last hour \(last at \d\d:\d\d UTC\)"
    assert re.fullmatch(pattern, hour), hour

"""Live portal views in headless Chromium: the portal (Daphne, Channels) and the broker run as
real processes; a device connecting shows as online, its messages appear in the live viewer,
counters move without a reload — and another tenant's traffic never shows."""

import time

import pytest

from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.portal.web import running_portal
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
KEY = "live-view-test-key"


@pytest.fixture
def platform(monkeypatch):
    """The broker and the portal as `make run` starts them, sharing the service key."""
    monkeypatch.setenv("MQTT_SERVICE_KEY", KEY)
    broker, mqtt_port = start_pg_broker("--sys-interval", "0.5")
    with running_portal(mqtt_port) as url:
        yield url, mqtt_port
    broker.terminate()
    broker.wait(timeout=10)


@pytest.fixture
def accounts():
    """Made before the browser starts: Playwright's sync API runs the test body in a context
    where Django would open (and leave open) a second database connection."""
    acme, _, _ = account_services.signup(
        tenant="acme", email="ops@acme.io", password="a long passphrase"
    )
    _, secret = device_services.device_create(tenant=acme, name="sensor-1")
    device_services.device_create(tenant=acme, name="sensor-2")
    other = tenant_services.tenant_create("other")
    _, other_secret = device_services.device_create(tenant=other, name="sensor-1")
    return secret, other_secret


def test_device_online_and_messages_live(platform, accounts, page):  # noqa: F811
    url, mqtt_port = platform
    secret, other_secret = accounts

    page.goto(f"{url}/login/")
    page.fill("input[name=email]", "ops@acme.io")
    page.fill("input[name=password]", "a long passphrase")
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/")
    page.wait_for_selector("#live-status.on")
    counter = page.locator('[data-sys="clients/connected"]')
    page.wait_for_function("el => el.textContent === '0'", arg=counter.element_handle())

    page.click("header nav >> role=link[name=Devices]")
    status = page.locator('[data-presence="sensor-1"]')
    assert status.text_content() == "offline"
    device = Paho(mqtt_port, "acme/sensor-1", secret, "sensor-1")
    intruder = Paho(mqtt_port, "other/sensor-1", other_secret, "sensor-1")  # same names, tenant B
    page.wait_for_selector('[data-presence="sensor-1"].online')
    assert page.locator('[data-presence="sensor-2"]').text_content() == "offline"
    device.close()
    page.wait_for_selector('[data-presence="sensor-1"]:not(.online)')

    # A page opened while the device is connected starts from the presence snapshot.
    device = Paho(mqtt_port, "acme/sensor-1", secret, "sensor-1")
    page.reload()
    page.wait_for_selector('[data-presence="sensor-1"].online')

    page.click("header nav >> role=link[name=Live]")
    page.fill("#watch-filter", "sensors/#")
    page.click("text=Watch")
    page.wait_for_selector("#watch-state:has-text('Watching sensors/#')")
    intruder.publish("sensors/t", "tenant B secret", 1)
    device.publish("sensors/t", "hello <b>live</b>", 1)
    device.publish("other/t", "not watched", 1)
    row = page.wait_for_selector("#live-messages tr.live-message")
    assert "sensors/t" in row.text_content()
    assert "hello <b>live</b>" in row.text_content()  # shown as text, never as markup
    time.sleep(0.5)
    texts = page.locator("#live-messages").text_content()
    assert "tenant B secret" not in texts and "not watched" not in texts

    page.click("text=Dashboard")
    page.wait_for_function(
        "el => Number(el.textContent) >= 2",
        arg=page.locator('[data-sys="messages/received"]').element_handle(),
    )
    assert page.locator('[data-sys="clients/connected"]').text_content() == "1"
    device.close()
    intruder.close()


def test_live_socket_needs_a_login(platform, page):  # noqa: F811
    url, _ = platform
    page.goto(f"{url}/login/")
    closed = page.evaluate(
        """() => new Promise(resolve => {
            const ws = new WebSocket(location.origin.replace('http', 'ws') + '/ws/live/');
            ws.onmessage = () => resolve('got data');
            ws.onclose = (event) => resolve(event.code);
        })"""
    )
    assert closed != "got data"

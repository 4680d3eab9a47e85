"""The first hour in headless Chromium against real processes (the portal under Daphne, the broker
on Postgres): onboarding snippets that work when pasted, the MQTT client in the browser talking to
a paho client, the device page's online state, and a secret rotated with a grace period while the
device stays connected. Screenshots are kept as artifacts (tests/browser.py)."""

import os
import subprocess
import sys
import time
import uuid

import pytest
from django.conf import settings
from django.db import connection

from common.runtime import processes
from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import JS, Paho
from tests.portal.web import log_in, running_portal

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop
KEY = "first-hour-test-key"
PASSWORD = "a long passphrase"


def _broker() -> tuple[subprocess.Popen, int, int]:
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    process = subprocess.Popen(
        processes.data_plane_command(
            port=0,
            ws_port=0,
            database_url=url,
            extra=["--log-level", "INFO", "--sys-interval", "0.5"],
        ),
        cwd=settings.BASE_DIR,
        stdout=subprocess.PIPE,
        text=True,
    )
    ports = {}
    while "mqtt" not in ports or "ws" not in ports:
        line = process.stdout.readline()
        assert line, "broker exited"
        if line.startswith("LISTENING"):
            _, name, address = line.split()
            ports[name] = int(address.rsplit(":", 1)[1])
    connection.close()
    return process, ports["mqtt"], ports["ws"]


@pytest.fixture
def platform(monkeypatch):
    """Broker and portal as `make run` starts them; the portal tells users the broker's real
    addresses (MQTT_PUBLIC_*), so what the snippets and the browser client say is reachable."""
    monkeypatch.setenv("MQTT_SERVICE_KEY", KEY)
    broker, mqtt_port, ws_port = _broker()
    public = {
        "MQTT_PUBLIC_HOST": "127.0.0.1",
        "MQTT_PUBLIC_PORT": str(mqtt_port),
        "MQTT_PUBLIC_WS_URL": f"ws://127.0.0.1:{ws_port}/mqtt",
    }
    with running_portal(mqtt_port, **public) as url:
        yield url, mqtt_port
    broker.terminate()
    broker.wait(timeout=10)


@pytest.fixture
def acme():
    """Made before the browser starts (Playwright's sync API and Django's connections)."""
    tenant, _, _ = account_services.signup(tenant="acme", email="ops@acme.io", password=PASSWORD)
    _, sensor = device_services.device_create(
        tenant=tenant, name="sensor-1", client_id_policy="any"
    )
    _, watcher = device_services.device_create(tenant=tenant, name="watcher")
    other = tenant_services.tenant_create("other")
    device_services.device_create(tenant=other, name="secret-device")
    return {"sensor-1": sensor, "watcher": watcher}


def login(page, url: str) -> None:
    log_in(page, url, "ops@acme.io", PASSWORD)


def test_onboarding_snippets_work_when_pasted(platform, acme, page, artifacts):
    url, mqtt_port = platform
    watcher = Paho(mqtt_port, "acme/watcher", acme["watcher"], "watcher")
    watcher.subscribe("hello/#", 1)
    login(page, url)
    page.click("text=Get started")
    page.fill("#create-first-device input[name=name]", "first")
    page.click("text=Create and fill in its secret")
    page.wait_for_selector("#secret-note:has-text('filled in below')")
    page.screenshot(path=str(artifacts / "onboarding.png"), full_page=True)

    # mosquitto_pub, pasted into a shell as shown.
    shell = page.text_content("#snippet-mosquitto")
    assert "acme/first" in shell and f"-p {mqtt_port}" in shell
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    message = watcher.messages.get(timeout=5)
    assert (message.topic, message.payload) == ("hello/first", b"hello from mosquitto_pub")

    # Python paho-mqtt, pasted into a file as shown.
    page.click("[data-tab=python]")
    python = page.text_content("#snippet-python")
    done = subprocess.run(
        [sys.executable, "-c", python], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0 and "published: True" in done.stdout, done.stdout + done.stderr
    assert watcher.messages.get(timeout=5).payload == b"hello from paho-mqtt"
    page.screenshot(path=str(artifacts / "onboarding-python.png"), full_page=True)

    # Node MQTT.js, beside the MQTT.js the tests install (tests/broker/js).
    page.click("[data-tab=node]")
    node = page.text_content("#snippet-node")
    script = JS / f"onboarding-{uuid.uuid4().hex[:8]}.cjs"
    script.write_text(node)
    try:
        if not (JS / "node_modules" / "mqtt").exists():
            subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund"], cwd=JS, check=True, timeout=300
            )
        done = subprocess.run(
            ["node", script.name], cwd=JS, capture_output=True, text=True, timeout=30
        )
    finally:
        script.unlink()
    assert done.returncode == 0 and "published" in done.stdout, done.stdout + done.stderr
    assert watcher.messages.get(timeout=5).payload == b"hello from MQTT.js"

    # The sketch carries the same identity (compiling it needs a board toolchain).
    page.click("[data-tab=arduino]")
    sketch = page.text_content("#snippet-arduino")
    assert '"acme/first"' in sketch and f"MQTT_PORT = {mqtt_port};" in sketch
    watcher.close()


def test_browser_mqtt_client_talks_to_a_paho_client(platform, acme, page, artifacts):
    url, mqtt_port = platform
    device = Paho(mqtt_port, "acme/sensor-1", acme["sensor-1"], "paho-1")
    device.subscribe("browser/#", 1)
    login(page, url)
    page.click("text=MQTT client")
    page.click("#connect-button")  # as the tenant console
    page.wait_for_selector("#client-state:text-is('connected')")  # not "disconnected"
    page.fill("#sub-filter", "from-paho/#")
    page.click("#subscribe-form button")
    page.wait_for_selector("#subscriptions li.subscribed")
    page.fill("#pub-topic", "browser/hello")
    page.fill("#pub-payload", "hi from the browser")
    page.select_option("#pub-qos", "1")
    page.fill("#pub-props", "source=portal\nrun=42")
    page.click("#publish-button")
    message = device.messages.get(timeout=10)
    assert (message.topic, message.payload, message.qos) == (
        "browser/hello",
        b"hi from the browser",
        1,
    )
    assert dict(message.properties.UserProperty) == {"source": "portal", "run": "42"}

    device.publish("from-paho/t", "hello <i>browser</i>", 1)
    row = page.wait_for_selector("#client-log tr.client-message")
    assert "from-paho/t" in row.text_content() and "hello <i>browser</i>" in row.text_content()
    page.screenshot(path=str(artifacts / "browser-client.png"), full_page=True)

    # As a device, with its secret typed in the page; a wrong secret says so.
    page.click("#disconnect-button")
    page.select_option("#identity", "sensor-1")
    page.fill("#device-secret", "not-the-secret")
    page.fill("#client-id", "browser-1")
    page.click("#connect-button")
    page.wait_for_selector("#client-error:not(:empty)")
    assert page.text_content("#client-state") == "disconnected"
    page.fill("#device-secret", acme["sensor-1"])
    page.click("#connect-button")
    page.wait_for_selector("#client-state:text-is('connected')")  # not "disconnected"
    page.fill("#pub-topic", "browser/as-device")
    page.fill("#pub-props", "")
    page.click("#publish-button")
    assert device.messages.get(timeout=10).topic == "browser/as-device"
    device.close()


def test_device_page_shows_online_state_and_connection(platform, acme, page, artifacts):
    url, mqtt_port = platform
    login(page, url)
    page.goto(f"{url}/devices/sensor-1/")
    assert page.text_content("#device-presence") == "offline"
    device = Paho(mqtt_port, "acme/sensor-1", acme["sensor-1"], "sensor-1-a")
    device.subscribe("commands/#", 1)
    page.wait_for_selector("#device-presence.online")  # live, no reload
    time.sleep(1.0)  # the broker writes presence every half second
    page.reload()
    connection_info = page.locator("dl.connection[data-client-id='sensor-1-a']")
    text = connection_info.text_content()
    assert "MQTT 5.0" in text and "127.0.0.1" in text and "commands/#" in text
    assert "UTC" in text  # connected since, with its time zone
    page.screenshot(path=str(artifacts / "device-online.png"), full_page=True)
    page.set_viewport_size({"width": 390, "height": 844})  # a phone
    page.screenshot(path=str(artifacts / "device-online-phone.png"), full_page=True)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= 390, f"the page scrolls sideways on a phone ({width}px)"
    device.close()
    page.wait_for_selector("#device-presence:not(.online)")
    time.sleep(1.0)
    page.reload()
    assert "normal" in page.text_content("#last-disconnect")
    assert page.locator("#no-connection").count() == 1
    # Another tenant's device is not there.
    assert page.goto(f"{url}/devices/secret-device/").status == 404


def test_rotation_with_grace_keeps_the_device_connected(platform, acme, page, artifacts):
    url, mqtt_port = platform
    old = acme["sensor-1"]
    device = Paho(mqtt_port, "acme/sensor-1", old, "rotating")
    login(page, url)
    page.goto(f"{url}/devices/sensor-1/")
    page.select_option("#rotate-grace", "3600")
    page.click("#rotate-form button[type=submit]")
    new = page.text_content("#device-secret")
    assert new and new != old
    assert page.locator("tr[data-state=retiring]").count() == 1
    assert "UTC" in page.locator("tr[data-state=retiring]").text_content()
    page.screenshot(path=str(artifacts / "rotation-grace.png"), full_page=True)
    time.sleep(1.0)  # the rotation has reached the broker
    assert not device.disconnected.is_set(), "rotating dropped the device"
    assert Paho(mqtt_port, "acme/sensor-1", old, "old-again").reason_code == 0
    fresh = Paho(mqtt_port, "acme/sensor-1", new, "fresh")
    assert fresh.reason_code == 0

    # Retiring now asks first, then drops only the old secret's connections.
    page.click("tr[data-state=retiring] >> text=Retire now")
    page.wait_for_selector("#confirm-retire")
    page.screenshot(path=str(artifacts / "rotation-confirm.png"), full_page=True)
    assert not device.disconnected.is_set()
    page.click("#confirm-button")
    assert device.disconnected.wait(3), "the old secret's connection stayed up"
    # The first: paho reconnects a second later, and that attempt's refusal comes after it.
    assert device.disconnect_reasons[0].value == 0x98
    time.sleep(0.3)
    assert not fresh.disconnected.is_set()
    assert Paho(mqtt_port, "acme/sensor-1", old, "old-3").reason_code == 0x86
    assert page.locator("tr[data-state=revoked]").count() == 1
    fresh.close()

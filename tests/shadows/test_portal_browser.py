"""The device page's shadow editor in headless Chromium, against a live portal and the real
broker: a member rewrites the desired state, the device is sent the delta on MQTT, reports back
on MQTT, and the page shows reported, delta and the history (both doors); an edit made on a page
the shadow has moved on from is refused, not merged blindly. Screenshots go to the artifacts."""

from __future__ import annotations

import json
import os
import uuid

import pytest
from playwright.sync_api import expect

from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.shadows import services as shadow_services
from tests.shadows.conftest import Fleet, Watcher
from tests.shadows.test_mqtt import send

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop


def test_shadow_editor(live_server, page, artifacts, tls_broker, tmp_path):
    slug = f"ed{uuid.uuid4().hex[:8]}"
    tenant, _, _ = account_services.signup(
        tenant=slug, email=f"me@{slug}.io", password="a long passphrase"
    )
    fleet = Fleet(tenant, tmp_path, None, None)
    device, fleet.secrets["lamp"] = device_services.device_create(tenant=tenant, name="lamp")
    lamp = Watcher(tls_broker.port, fleet, "lamp", subscribe="$aws/things/lamp/shadow/update/+")

    def told(kind: str) -> list[dict]:
        """What the device was sent after a change: the bodies on `…/update/{kind}`."""
        replies = lamp.get(3 if kind == "delta" else 2)
        return [body for topic, body in replies if topic.endswith(f"/update/{kind}")]

    try:
        page.goto(f"{live_server.url}/login/")
        page.fill("input[name=email]", f"me@{slug}.io")
        page.fill("input[name=password]", "a long passphrase")
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        page.goto(f"{live_server.url}/devices/lamp/")
        expect(page.locator("#shadow-none")).to_be_visible()

        page.fill("#shadow-desired", '{"color": "red", "power": "on"}')
        page.click("#shadow-save")
        expect(page.locator("#shadow-version")).to_have_text("1")
        assert json.loads(page.locator("#shadow-delta").text_content()) == {
            "color": "red",
            "power": "on",
        }
        (delta,) = told("delta")  # the device is told, on MQTT
        assert delta["state"] == {"color": "red", "power": "on"} and delta["version"] == 1

        send(
            lamp,
            "$aws/things/lamp/shadow/update",
            {"state": {"reported": {"color": "red", "power": "on"}}},
        )
        assert told("accepted")[0]["version"] == 2  # committed: the page can show it
        page.reload()
        expect(page.locator("#shadow-version")).to_have_text("2")
        assert json.loads(page.locator("#shadow-reported").text_content()) == {
            "color": "red",
            "power": "on",
        }
        expect(page.locator("#shadow-delta")).to_contain_text("none")
        rows = page.locator("#shadow-history tbody tr")
        expect(rows).to_have_count(2)
        assert rows.nth(0).get_attribute("data-via") == "mqtt"
        assert "lamp" in rows.nth(0).text_content()
        assert rows.nth(1).get_attribute("data-via") == "api"
        assert f"portal:me@{slug}.io" in rows.nth(1).text_content()
        page.screenshot(path=str(artifacts / "shadow-editor.png"), full_page=True)

        # Someone else changes the shadow while this page shows version 2: the edit is refused.
        shadow_services.shadow_update(
            device=device,
            name="",
            payload=b'{"state":{"desired":{"mode":"eco"}}}',
            if_match=None,
            actor="api:other",
        )
        assert told("delta")[0]["version"] == 3
        page.fill("#shadow-desired", '{"color": "blue"}')
        page.click("#shadow-save")
        expect(page.locator("p.flash.error")).to_contain_text("changed since this page showed it")
        expect(page.locator("#shadow-version")).to_have_text("3")

        # On the fresh page, the whole desired state is what the member wrote: the fields
        # left out are deleted (null), the device is told the new delta.
        page.fill("#shadow-desired", '{"color": "blue"}')
        page.click("#shadow-save")
        expect(page.locator("#shadow-version")).to_have_text("4")
        assert json.loads(page.locator("#shadow-desired").input_value()) == {"color": "blue"}
        (delta,) = told("delta")
        assert delta["state"] == {"color": "blue"} and delta["version"] == 4
    finally:
        lamp.close()

"""A job's progress per device in the portal, in headless Chromium against a live portal and the
real broker: a job made through the API reaches two devices, one finishes it on MQTT, the page
shows each device's status and the count, and a member cancels the rest with the page's button
(the other device is told on MQTT). Screenshots go to the artifacts."""

from __future__ import annotations

import json
import os
import uuid

import pytest
from playwright.sync_api import expect

from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.jobs import services as job_services
from tests.jobs.test_rest import by_topic, send
from tests.shadows.conftest import Fleet, Watcher

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop


def test_job_progress_per_device(live_server, page, artifacts, jobs_broker, tmp_path):
    slug = f"jp{uuid.uuid4().hex[:8]}"
    tenant, _, _ = account_services.signup(
        tenant=slug, email=f"me@{slug}.io", password="a long passphrase"
    )
    fleet = Fleet(tenant, tmp_path, None, None)
    for name in ("pump", "fan"):
        _, fleet.secrets[name] = device_services.device_create(tenant=tenant, name=name)
    pump = Watcher(jobs_broker.port, fleet, "pump", subscribe="$aws/things/pump/jobs/#")
    fan = Watcher(jobs_broker.port, fleet, "fan", subscribe="$aws/things/fan/jobs/notify-next")
    try:
        targets = {"devices": ["pump", "fan"]}
        job_services.job_create(tenant=tenant, job_id="fw-7", document={"v": 7}, targets=targets)
        assert len(pump.get(2)) == 2 and len(fan.get(1)) == 1
        send(pump, "$aws/things/pump/jobs/fw-7/update", {"status": "SUCCEEDED"})
        assert "$aws/things/pump/jobs/fw-7/update/accepted" in by_topic(pump, 3)

        page.goto(f"{live_server.url}/login/")
        page.fill("input[name=email]", f"me@{slug}.io")
        page.fill("input[name=password]", "a long passphrase")
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        page.click("nav >> text=Jobs")
        expect(page.locator("#jobs tr[data-job=fw-7]")).to_contain_text("1 of 2 ended")
        page.click("#jobs >> text=fw-7")
        expect(page.locator("#job-executions tr[data-device=pump] .status")).to_have_text(
            "SUCCEEDED"
        )
        expect(page.locator("#job-executions tr[data-device=fan] .status")).to_have_text("QUEUED")
        assert json.loads(page.locator("#job-document").text_content()) == {"v": 7}
        page.screenshot(path=str(artifacts / "job-progress.png"), full_page=True)

        page.click("#job-cancel button")
        expect(page.locator("#job-status")).to_have_text("CANCELED")
        expect(page.locator("#job-executions tr[data-device=fan] .status")).to_have_text("CANCELED")
        assert "execution" not in by_topic(fan, 1)["$aws/things/fan/jobs/notify-next"]
    finally:
        pump.close()
        fan.close()

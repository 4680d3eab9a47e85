"""Jobs, device groups and fleet provisioning made in the portal, in headless Chromium against a
live portal: a member makes a group, fills it, makes a job for it through the form (a bad
document first, refused in red beside the box), lands on the job's progress page and finds the
same job in the REST API; then makes a provisioning template and a claim certificate, downloads
its key (shown this once) and revokes it. Screenshots go to the artifacts."""

from __future__ import annotations

import os
import uuid

import pytest
from playwright.sync_api import expect
from rest_framework.test import APIClient

from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.models import FleetCertificate
from tests.portal.web import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop

PASSWORD = "a long passphrase"


@pytest.fixture
def owner():
    """A tenant with three devices, its owner's email and an API client of the tenant."""
    slug = f"fb{uuid.uuid4().hex[:8]}"
    tenant, user, _ = account_services.signup(tenant=slug, email=f"me@{slug}.io", password=PASSWORD)
    for name in ("lamp", "pump", "fan"):
        device_services.device_create(tenant=tenant, name=name)
    _, token = account_services.api_token_create(user=user, tenant=tenant)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return user.email, api


def test_a_group_and_a_job_for_it_made_in_the_browser(live_server, page, artifacts, owner):
    email, api = owner
    url = live_server.url
    log_in(page, url, email, PASSWORD)

    page.click("nav >> text=Device groups")
    form = page.locator("#group-create form")
    form.locator("input[name=name]").fill("kitchen")
    form.locator("select[name=devices]").select_option(["pump"])
    form.locator("button[type=submit]").click()
    page.wait_for_url(f"{url}/groups/kitchen/")
    page.locator("#group-add select[name=devices]").select_option(["fan"])
    page.click("#group-add button[type=submit]")
    expect(page.locator("#group-members tr[data-device]")).to_have_count(2)

    page.click("nav >> text=Jobs")
    form = page.locator("#job-create form")
    form.locator("input[name=job_id]").fill("fw-2-1")
    form.locator("textarea[name=document]").fill('{"version": "2.1",}')
    form.locator("select[name=devices]").select_option(["lamp"])
    form.locator("select[name=groups]").select_option(["kitchen"])
    form.locator("input[name=timeout_minutes]").fill("30")
    form.locator("button[type=submit]").click()
    error = page.locator("#job-create label:has(textarea[name=document]) .error")
    expect(error).to_contain_text("Not valid JSON")
    red = "rgb(192, 57, 43)"  # --danger, #c0392b
    assert error.evaluate("e => getComputedStyle(e).color") == red
    box = page.locator("textarea[name=document]")
    assert box.evaluate("e => getComputedStyle(e).borderTopColor") == red
    page.screenshot(path=str(artifacts / "job-form-error.png"), full_page=True)

    # What was picked is still picked; only the document is fixed.
    box.fill('{"version": "2.1"}')
    form.locator("select[name=abort_failure_type]").select_option("FAILED")
    form.locator("input[name=abort_threshold]").fill("50")
    form.locator("button[type=submit]").click()
    page.wait_for_url(f"{url}/jobs/fw-2-1/")
    expect(page.locator("#job-status")).to_have_text("IN_PROGRESS")
    for device in ("lamp", "pump", "fan"):
        status = page.locator(f"#job-executions tr[data-device={device}] .status")
        expect(status).to_have_text("QUEUED")
    expect(page.locator("#job-targets")).to_contain_text("group kitchen")
    page.screenshot(path=str(artifacts / "job-created.png"), full_page=True)

    job = api.get("/api/v1/jobs/fw-2-1").json()
    assert job["document"] == {"version": "2.1"} and job["timeout_minutes"] == 30
    assert job["targets"] == {"devices": ["lamp"], "groups": ["kitchen"]}
    assert job["abort"]["criteria"][0]["threshold_percentage"] == 50
    assert sorted(e["device"] for e in job["executions"]) == ["fan", "lamp", "pump"]


def test_a_template_and_a_claim_made_in_the_browser(live_server, page, artifacts, owner):
    email, api = owner
    url = live_server.url
    log_in(page, url, email, PASSWORD)

    page.click("nav >> text=Fleet provisioning")
    form = page.locator("#template-create form")
    form.locator("input[name=name]").fill("sensors")
    form.locator("input[name=device_name_template]").fill("sensor-{SerialNumber}")
    rules = '[{"action": "both", "permission": "allow", "topic": "sensors/${client}/#"}]'
    form.locator("textarea[name=acl_rules]").fill(rules)
    form.locator("button[type=submit]").click()
    page.wait_for_url(f"{url}/provisioning/sensors/")
    expect(page.locator("#template-acl")).to_contain_text("sensors/${client}/#")

    page.click("#claim-create button")
    key = page.locator("#claim-key").text_content()
    assert "PRIVATE KEY" in key
    with page.expect_download() as download:
        page.click("#claim-key-download")
    assert open(download.value.path()).read() == key
    page.screenshot(path=str(artifacts / "claim-issued.png"), full_page=True)

    claims = api.get("/api/v1/provisioning-templates/sensors/claims").json()["results"]
    assert len(claims) == 1
    certificate_id = claims[0]["certificate_id"]
    assert page.locator("#claim-certificate").text_content() == claims[0]["certificate_pem"]

    page.reload()  # the key was shown once
    expect(page.locator("#claim-issued")).to_have_count(0)
    assert key not in page.content()
    row = page.locator(f"#claims tr[data-claim='{certificate_id}']")
    row.locator("button").click()
    expect(row.locator(".claim-state")).to_contain_text("revoked")
    assert FleetCertificate.objects.get(certificate_id=certificate_id).revoked_at is not None

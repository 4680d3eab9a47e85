"""Issue 41 in headless Chromium against a live portal: a member opens Device certificates from
the navigation, imports two certificates at once (one pasted, broken; one uploaded as a file),
sees a result for each (the broken one refused in words, the other registered), finds the
registered one in the list (device, fingerprint, issuer, expiry, active) and in the REST API,
then revokes it: asked first (dismissed, nothing happens; accepted, it is revoked)."""

from __future__ import annotations

import os
import uuid

import pytest
from playwright.sync_api import expect
from rest_framework.test import APIClient

from common.security.device_credentials import make_ca, make_leaf, pem_of
from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.models import DeviceCertificate
from tests.portal.web import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop

PASSWORD = "a long passphrase"


def test_import_two_certificates_one_broken_then_list_and_revoke(
    live_server, page, artifacts, tmp_path
):
    slug = f"cb{uuid.uuid4().hex[:8]}"
    tenant, user, _ = account_services.signup(tenant=slug, email=f"me@{slug}.io", password=PASSWORD)
    device_services.device_create(tenant=tenant, name="lamp")
    _, token = account_services.api_token_create(user=user, tenant=tenant)
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    ca, ca_key = make_ca("Example Fleet CA")
    good = pem_of(make_leaf("lamp", ca, ca_key)[0])
    (tmp_path / "lamp.pem").write_text(good)
    broken = (
        "device: pump\n-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n"
    )

    url = live_server.url
    log_in(page, url, f"me@{slug}.io", PASSWORD)
    page.click("nav >> text=Device certificates")
    page.wait_for_url(f"{url}/certificates/")
    expect(page.locator("#certificates tbody")).to_contain_text("No device certificates")

    form = page.locator("#certificates-import form")
    form.locator("textarea[name=pems]").fill(broken)
    form.locator("input[name=files]").set_input_files(str(tmp_path / "lamp.pem"))
    form.locator("button[type=submit]").click()

    results = page.locator("#import-results tbody tr")
    expect(results).to_have_count(2)
    refused = page.locator("#import-results tr[data-index='0']")
    expect(refused).to_have_attribute("data-status", "error")
    expect(refused).to_contain_text("pump")
    expect(refused.locator(".error")).to_contain_text("not a readable certificate")
    registered = page.locator("#import-results tr[data-index='1']")
    expect(registered).to_have_attribute("data-status", "registered")
    expect(registered).to_contain_text("lamp.pem")
    expect(registered.locator(".result")).to_contain_text("registered")
    page.screenshot(path=str(artifacts / "certificates-imported.png"), full_page=True)

    certificate = DeviceCertificate.objects.get(tenant=tenant)
    row = page.locator(f"#certificates tr[data-certificate='{certificate.id}']")
    expect(row).to_contain_text("lamp")
    expect(row).to_contain_text("CN=Example Fleet CA")
    expect(row).to_contain_text(certificate.not_after.strftime("%Y-%m-%d"))
    expect(row.locator(".status")).to_have_text("active")
    assert row.locator("code[title]").first.get_attribute("title") == certificate.fingerprint
    listed = api.get("/api/v1/certificates").json()["results"]
    assert [(r["device"], r["status"]) for r in listed] == [("lamp", "active")]

    # Revoking asks first: dismissed, the certificate stays; accepted, it is revoked.
    page.once("dialog", lambda dialog: dialog.dismiss())
    row.locator("button", has_text="Revoke").click()
    page.wait_for_timeout(500)
    certificate.refresh_from_db()
    assert certificate.revoked_at is None
    page.once("dialog", lambda dialog: dialog.accept())
    row.locator("button", has_text="Revoke").click()
    page.wait_for_url(f"{url}/certificates/")
    expect(page.locator(".flash.success")).to_contain_text("revoked")
    expect(row.locator(".status")).to_contain_text("revoked")
    expect(row.locator("button", has_text="Revoke")).to_have_count(0)
    page.screenshot(path=str(artifacts / "certificates-revoked.png"), full_page=True)
    assert api.get("/api/v1/certificates").json()["results"][0]["status"] == "revoked"

"""End to end in headless Chromium (Debian's), driven by Playwright, against a live server:
sign up -> create a device -> see its username and secret -> log out -> log in -> still listed."""

import os

import pytest
from playwright.sync_api import expect

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop


def test_signup_device_logout_login(live_server, page):
    page.goto(f"{live_server.url}/signup/")
    page.fill("input[name=tenant]", "acme-e2e")
    page.fill("input[name=email]", "e2e@acme.io")
    page.fill("input[name=password]", "a long passphrase")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    assert "acme-e2e" in page.content()

    page.click("header nav >> role=link[name=Devices]")
    page.fill("form[method=post] input[name=name]", "sensor-1")
    page.click("text=Create device")
    username = page.text_content("#device-username")
    secret = page.text_content("#device-secret")
    assert username == "acme-e2e/sensor-1"
    assert secret and len(secret) >= 22

    from common.security.secrets import verify_secret
    from tenants.models import Credential

    assert verify_secret(secret, Credential.objects.get(device__name="sensor-1").secret_hash)

    page.reload()  # shown once: gone on the next view
    assert secret not in page.content()

    page.click("text=Log out")
    page.wait_for_url(f"{live_server.url}/login/")
    page.fill("input[name=email]", "e2e@acme.io")
    page.fill("input[name=password]", "a long passphrase")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    page.click("header nav >> role=link[name=Devices]")
    page.wait_for_url(f"{live_server.url}/devices/")
    # The click starts a navigation; count() alone would read whatever page is up at that instant.
    expect(page.locator("table a", has_text="sensor-1")).to_have_count(1)
    assert "acme-e2e/sensor-1" in page.content()

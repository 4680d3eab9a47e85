"""The email confirmation as a new user meets it, in headless Chromium against a live server: the
banner after signup, "Send the link again", the link from the email (log in first when asked),
the banner gone. Screenshots in the artifacts folder."""

import os
import re

import pytest
from django.core import mail

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop
PASSWORD = "a long passphrase"


def test_confirming_the_email_address_in_a_browser(live_server, page, artifacts):
    page.goto(f"{live_server.url}/signup/")
    page.fill("input[name=tenant]", "acme-mail")
    page.fill("input[name=email]", "me@acme.io")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    banner = page.locator("[data-email-unverified]")
    assert banner.is_visible() and "me@acme.io" in banner.inner_text()
    page.screenshot(path=str(artifacts / "email-unverified-banner.png"), full_page=True)

    # The banner follows, and "send again" comes back here.
    page.click("header nav >> role=link[name=Devices]")
    page.click("text=Send the link again")
    page.wait_for_url(f"{live_server.url}/devices/")
    assert "We sent a new link to me@acme.io" in page.inner_text("main")
    assert len(mail.outbox) == 2  # signup's, and this one
    link = re.search(r"https?://\S+/account/verify/\S+", mail.outbox[-1].body).group(0)

    page.click("text=Log out")  # opened later, logged out: asked to log in, then confirmed
    page.wait_for_url(f"{live_server.url}/login/")
    page.goto(link)
    assert "Log in to confirm your email address" in page.inner_text("main")
    page.fill("input[name=email]", "me@acme.io")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    assert "me@acme.io is confirmed" in page.inner_text("main")
    assert page.locator("[data-email-unverified]").count() == 0
    page.screenshot(path=str(artifacts / "email-confirmed.png"), full_page=True)
    page.click("header .who a")  # the account's page: change the password
    page.wait_for_url(f"{live_server.url}/account/password/")
    assert "Change your password" in page.inner_text("main")
    page.screenshot(path=str(artifacts / "password-change.png"), full_page=True)

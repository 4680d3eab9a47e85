"""Every portal page in headless Chromium, served as `make run` serves it (Daphne, beside a real
broker), under the portal's own Content-Security-Policy: nothing
the browser blocks or fails to load (an inline script, handler or style attribute is blocked, and
the behaviour it carried silently goes), and the behaviour that used to be inline works — the
"Get started" tabs, pasted secret and device picker, the rule's delete confirmation, the quota
meters."""

import os
import time

import pytest
from playwright.sync_api import expect

from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.models import Rule
from tenants.rules import services as rule_services
from tests.portal.test_first_hour_browser import platform  # noqa: F401 (a fixture)
from tests.portal.web import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop

PAGES = [
    "/",
    "/devices/",
    "/devices/sensor-1/",
    "/start/",
    "/client/",
    "/live/",
    "/acls/",
    "/rules/",
    "/rules/new/",
    "/rules/hot/",
    "/sessions/",
    "/retained/",
    "/topics/",
    "/jobs/",
    "/quota/",
    "/usage/",
    "/invoices/",
    "/budget/",
    "/billing/details/",
    "/members/",
    "/identity/",
    "/audit/",
    "/tokens/",
]


@pytest.fixture
def acme_csp():
    """Made before the browser starts (Playwright's sync API and Django's connections)."""
    tenant, _, _ = account_services.signup(
        tenant="acme-csp", email="csp@acme.io", password="a long pass"
    )
    device_services.device_create(tenant=tenant, name="sensor-1")
    device_services.device_create(tenant=tenant, name="sensor-2")
    rule_services.rule_create(tenant=tenant, name="hot", sql='SELECT * FROM "t/#"', actions=[])


def test_no_page_breaks_the_policy_and_what_was_inline_works(platform, acme_csp, page):  # noqa: F811
    url, _ = platform
    problems: list[str] = []
    page.on(
        "console",
        lambda m: problems.append(f"{page.url}: {m.text}") if m.type == "error" else None,
    )
    page.on("pageerror", lambda exc: problems.append(f"{page.url}: {exc}"))
    log_in(page, url, "csp@acme.io", "a long pass")
    for path in PAGES:
        page.goto(url + path)
        page.wait_for_load_state("load")
    assert problems == []

    # Get started: the tabs show their snippet, a pasted secret fills them, the picker switches.
    page.goto(f"{url}/start/")
    python = page.locator("#snippet-python")
    expect(python).to_be_hidden()
    page.click("[data-tab=python]")
    expect(python).to_be_visible()
    expect(page.locator("#snippet-mosquitto")).to_be_hidden()
    page.fill("#secret-input", "pasted-secret-42")
    expect(python).to_contain_text("pasted-secret-42")
    page.select_option("#device-picker select", "sensor-2")
    page.wait_for_url("**/start/?device=sensor-2")
    expect(page.locator("#snippet-mosquitto")).to_contain_text("acme-csp/sensor-2")

    # Quota meters: as wide as the share in use (nothing is in use: empty, not full).
    page.goto(f"{url}/quota/")
    meter = page.locator(".meter[data-percent='0']").first
    assert meter.locator("span").bounding_box()["width"] == 0
    assert meter.bounding_box()["width"] > 0

    # Deleting a rule asks first: dismissed, it stays; accepted, it goes.
    page.goto(f"{url}/rules/hot/")
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.click("text=Delete rule")
    page.wait_for_timeout(500)
    assert Rule.objects.filter(name="hot").exists()
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("text=Delete rule")
    page.wait_for_url(f"{url}/rules/")
    assert not Rule.objects.filter(name="hot").exists()
    assert problems == []


def test_the_browser_client_cannot_be_clicked_before_its_script_runs(platform, acme_csp, page):  # noqa: F811
    """Connect is disabled until client.js is ready: a click while the script is still on its way
    submitted the form to the page itself, a reload that looked like a failed connect (it failed
    a CI run). Here the script comes a second late; the click waits for it and connects."""
    url, _ = platform
    log_in(page, url, "csp@acme.io", "a long pass")

    def late(route):
        time.sleep(1.0)
        route.continue_()

    page.route("**/portal/client.js", late)
    page.goto(f"{url}/client/", wait_until="commit")
    page.click("#connect-button")  # as the tenant console
    page.wait_for_selector("#client-state:text-is('connected')")
    assert page.url == f"{url}/client/"

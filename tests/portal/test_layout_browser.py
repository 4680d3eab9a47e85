"""Every page the side navigation reaches, as an owner sees it in headless Chromium at 1280×800
and on a phone at 390×844, served as `make run` serves it: nothing wider than the window, no
console error, every navigation label on one line on the desktop, the current page marked, and
on the phone the navigation folded behind a Menu button that opens it and whose links work.
Screenshots of each page are left in the test's tmp dir (pytest's --basetemp keeps them)."""

import os

import pytest
from playwright.sync_api import expect

from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.fleet import services as fleet
from tenants.jobs import services as job_services
from tenants.rules import services as rule_services
from tests.portal.test_first_hour_browser import platform  # noqa: F401 (a fixture)
from tests.portal.web import log_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop

PASSWORD = "a long pass"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def acme_layout():
    """Made before the browser starts (Playwright's sync API and Django's connections)."""
    tenant, _, _ = account_services.signup(
        tenant="acme-layout", email="me@acme.io", password=PASSWORD
    )
    device_services.device_create(tenant=tenant, name="sensor-with-a-rather-long-name-01")
    rule_services.rule_create(tenant=tenant, name="hot", sql='SELECT * FROM "t/#"', actions=[])
    group = "a-group-with-a-rather-long-name-01"
    job_services.group_create(tenant=tenant, name=group, devices=[])
    job_services.job_create(
        tenant=tenant,
        job_id="firmware-update-with-a-rather-long-id-2026",
        document={"version": "2.1"},
        targets={"devices": ["sensor-with-a-rather-long-name-01"], "groups": [group]},
    )
    fleet.template_create(
        tenant=tenant, name="a-template-with-a-long-name", device_name_template="sensor-{Serial}"
    )


def _overflow(page) -> int:
    """How many CSS pixels the page is wider than the window (0 when it fits)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


def test_every_nav_page_fits_1280_and_a_phone_and_the_menu_works(
    platform,  # noqa: F811
    acme_layout,
    page,
    tmp_path,
):
    url, _ = platform
    problems: list[str] = []
    page.on(
        "console",
        lambda m: problems.append(f"{page.url}: {m.text}") if m.type == "error" else None,
    )
    page.on("pageerror", lambda exc: problems.append(f"{page.url}: {exc}"))
    page.set_viewport_size(DESKTOP)
    log_in(page, url, "me@acme.io", PASSWORD)
    nav_links = page.locator("header.site nav a")
    hrefs = [h for h in nav_links.evaluate_all("links => links.map(a => a.getAttribute('href'))")]
    pages = [h for h in hrefs if h.startswith("/") and not h.startswith("/api/")]
    assert {"/devices/", "/rules/", "/usage/", "/members/", "/audit/"} <= set(pages)

    for path in pages:
        page.goto(url + path)
        page.wait_for_load_state("load")
        name = path.strip("/").replace("/", "-") or "dashboard"
        page.screenshot(path=tmp_path / f"desktop-{name}.png", full_page=True)
        assert _overflow(page) <= 0, f"{path} is wider than 1280 px"
        current = page.locator("header.site nav a[aria-current=page]")
        expect(current).to_have_count(1)
        expect(current).to_have_attribute("href", path)
        # One line per label: the old header wrapped its 20 links into two-line labels.
        heights = nav_links.evaluate_all(
            "links => links.map(a => a.getBoundingClientRect().height)"
        )
        assert max(heights) < 36, f"a navigation label wraps on {path}"
        expect(page.locator("header.site nav")).to_be_visible()
        expect(page.locator(".nav-button")).to_be_hidden()

    page.set_viewport_size(PHONE)
    too_wide = []
    for path in pages:
        page.goto(url + path)
        page.wait_for_load_state("load")
        name = path.strip("/").replace("/", "-") or "dashboard"
        page.screenshot(path=tmp_path / f"phone-{name}.png", full_page=True)
        if _overflow(page) > 0:
            too_wide.append(f"{path} by {_overflow(page)} px")
        expect(page.locator("header.site nav")).to_be_hidden()  # folded behind Menu
    assert too_wide == [], "wider than a 390 px phone"

    # On the phone: open the menu, follow a link, land there with the menu folded again.
    page.goto(f"{url}/")
    page.click(".nav-button")
    nav = page.locator("header.site nav")
    expect(nav).to_be_visible()
    page.screenshot(path=tmp_path / "phone-menu-open.png", full_page=True)
    assert _overflow(page) <= 0
    nav.get_by_role("link", name="Rules", exact=True).click()
    page.wait_for_url(f"{url}/rules/")
    expect(nav).to_be_hidden()
    expect(page.get_by_role("link", name="hot", exact=True)).to_be_visible()
    assert problems == []

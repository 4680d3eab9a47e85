"""The inspection pages in headless Chromium, against the portal under Daphne beside a real broker
on Postgres (issue 30, point 4): from the navigation, the sessions list with each session's
state, node, queue depth and in flight; a session's page with its subscriptions and queued
messages previewed; the retained browser (filter, preview, delete one, a bad filter named); the
topic tree, whose retained topics link to the browser."""

from __future__ import annotations

import os
import re

import pytest

from tests.inspection.world import build_acme, tenant
from tests.portal.web import log_in, running_portal
from tests.tenancy.test_broker_tenancy import running_pg_broker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop
PASSWORD = "a long passphrase"


@pytest.fixture
def platform(monkeypatch):
    """acme's broker state made by paho clients (before the browser starts), and the portal."""
    monkeypatch.setenv("MQTT_SESSION_FIGURES_INTERVAL", "0.3")
    with running_pg_broker("--no-archive") as port:
        acme = tenant("acme", port, email="ops@acme.io", password=PASSWORD)
        build_acme(acme)
        try:
            with running_portal(port) as url:
                yield url
        finally:
            acme.close()


def shown(page, selector: str) -> str:
    return re.sub(r"\s+", " ", page.locator(selector).inner_text()).strip()


def test_sessions_queue_retained_and_topics_pages(platform, page, artifacts):
    url = platform
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    log_in(page, url, "ops@acme.io", PASSWORD)

    page.click("header nav >> text=Sessions")
    page.wait_for_selector("table#sessions")
    ids = page.locator("#sessions tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.clientId)"
    )
    assert ids == ["live-clean", "parked", "pub", "slow"]
    slow = '#sessions tr[data-client-id="slow"]'
    assert shown(page, f"{slow} .state-cell") == "online"
    assert (shown(page, f"{slow} .queued"), shown(page, f"{slow} .inflight")) == ("3", "2")
    assert shown(page, f"{slow} .expiry") == "600 s"
    assert shown(page, f"{slow} .node") not in ("", "—")
    parked = '#sessions tr[data-client-id="parked"]'
    assert shown(page, f"{parked} .state-cell") == "offline"
    assert shown(page, f"{parked} .queued") == "5" and shown(page, f"{parked} .node") == "—"
    assert (
        shown(page, '#sessions tr[data-client-id="live-clean"] .expiry')
        == "ends with its connection"
    )
    page.screenshot(path=str(artifacts / "inspection-sessions.png"), full_page=True)

    page.click(f"{parked} a")
    page.wait_for_selector("table#queue")
    assert shown(page, "#session-state") == "offline"
    assert shown(page, '#subscriptions tr[data-filter="jobs/#"]').startswith("jobs/# 1")
    assert page.locator("#queue tbody tr").count() == 5
    first = page.locator("#queue tbody tr").first
    assert first.locator(".payload-encoding").inner_text() == "json"
    assert first.locator("pre.payload").inner_text() == '{"job": 1, "name": "calibrate"}'
    third = page.locator("#queue tbody tr").nth(2)
    assert third.locator(".payload-encoding").inner_text() == "hex"
    assert third.locator("pre.payload").inner_text() == "00 01 02 03 04 05 06 07"
    page.screenshot(path=str(artifacts / "inspection-session.png"), full_page=True)

    page.click("header nav >> text=Retained")
    page.wait_for_selector("table#retained")
    topics = page.locator("#retained tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.topic)"
    )
    assert topics == ["config/x", "sensors/a/temp", "sensors/b/temp"]
    page.fill("#retained-filter input[name=topic]", "sensors/#/temp")
    page.click("#retained-filter button")
    assert shown(page, "#filter-error") == (
        "Not a topic filter: '#' must be the last level and alone in it."
    )
    page.fill("#retained-filter input[name=topic]", "sensors/+/temp")
    page.click("#retained-filter button")
    page.wait_for_selector("#retained-count")
    assert shown(page, "#retained-count") == "2 retained messages match sensors/+/temp."
    row = '#retained tr[data-topic="sensors/a/temp"]'
    assert shown(page, f"{row} pre.payload") == '{"t": 20.5}'
    page.screenshot(path=str(artifacts / "inspection-retained.png"), full_page=True)
    page.once("dialog", lambda dialog: dialog.accept())  # "Delete the retained message on …?"
    page.click(f"{row} button.danger")
    page.wait_for_selector(".flash")
    assert shown(page, ".flash") == "Deleted 1 retained message (sensors/a/temp)."
    assert page.locator(row).count() == 0  # back on the same filter, without it
    assert shown(page, "#retained-count") == "1 retained message match sensors/+/temp."

    page.click("header nav >> text=Topics")
    page.wait_for_selector("#topic-tree")
    assert shown(page, 'li[data-topic="jobs/#"] > .subscribers') == "2 subscriptions"
    # Deleted above: no longer retained (still in the tree, published lately: its rate shows).
    assert page.locator('li[data-topic="sensors/a/temp"] > .retained-link').count() == 0
    assert page.locator('li[data-topic="sensors/b/temp"] > .retained-link').count() == 1
    page.screenshot(path=str(artifacts / "inspection-topics.png"), full_page=True)
    page.click('li[data-topic="sensors/b/temp"] > a.retained-link')
    page.wait_for_selector("table#retained")
    assert page.input_value("#retained-filter input[name=topic]") == "sensors/b/temp"
    assert shown(page, "#retained-count") == "1 retained message match sensors/b/temp."
    assert not [p for p in problems if "Content Security Policy" in p], problems

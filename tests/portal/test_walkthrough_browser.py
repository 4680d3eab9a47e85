"""A new user's walk-through of the portal in headless Chromium at 1280×800 (issue 41): the
dashboard's figures stay inside their cards, the account menu and "Log out" are in the first
800 px, the journey's topic column breaks a topic only between its levels, no page is wider than
the window; every link on the usage page answers; "Run over history" shows and takes ISO 8601
UTC; the browser MQTT client runs under the portal's Content-Security-Policy; the TLS endpoint
and a snippet for AWS's device SDK are on the portal, and a fleet claim's CA is not offered as
the one to trust the broker with. Screenshots go to the artifacts folder (tests/browser.py)."""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime

import pytest
from playwright.sync_api import expect

from common.security.device_credentials import make_leaf, pem_of
from tenants.accounts import services as account_services
from tenants.devices import identity
from tenants.devices import services as device_services
from tenants.fleet import services as fleet
from tenants.models import DeviceUsage
from tenants.rules import services as rule_services
from tests.broker.clients import Paho
from tests.portal.test_first_hour_browser import platform  # noqa: F401 (a fixture)
from tests.portal.web import log_in
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop
PASSWORD = "a long passphrase"
DESKTOP = {"width": 1280, "height": 800}
DEEP_TOPIC = "factory/line-4/sensor-temperature-12/readings"


@pytest.fixture
def acme_walk(tmp_path, monkeypatch):
    """A tenant a week into its trial: a device with a certificate of its own (whose audit entry
    names its 64-digit fingerprint), a rule, messages on `queue/fill` and a deep topic in the
    journey (the broker stops at the end, writing the journey), and usage under a claim
    certificate, the browser client and a device since deleted."""
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    tenant, _, _ = account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    _, secret = device_services.device_create(tenant=tenant, name="sensor-1")
    thermostat, _ = device_services.device_create(tenant=tenant, name="thermostat42")
    certificate, _ = make_leaf("thermostat42", None, None)
    identity.device_certificate_register(device=thermostat, pem=pem_of(certificate))
    rule_services.rule_create(
        tenant=tenant, name="hot", sql='SELECT * FROM "queue/#" WHERE payload.t > 20', actions=[]
    )
    fleet.template_create(tenant=tenant, name="factory", device_name_template="sensor-{Serial}")
    today = datetime.now(UTC).date()
    for name in ("sensor-1", "$claim", "$console", "$rules", "retired-1", ""):
        DeviceUsage.objects.create(tenant=tenant, device=name, day=today, message_units=3)
    broker, port = start_pg_broker("--no-archive", "--journey-interval", "0.2")
    try:
        pub = Paho(port, "acme/sensor-1", secret, "sensor-1")
        pub.subscribe("queue/#", 1)
        pub.publish("queue/fill", b'{"t": 21.5}', 1)
        pub.publish(DEEP_TOPIC, b"{}", 1)
        pub.expect(1)
        pub.close()
    finally:
        broker.terminate()
        assert broker.wait(timeout=15) == 0
    return tenant


def _overflow(page) -> int:
    """How many CSS pixels the page is wider than the window (0 when it fits)."""
    return page.evaluate("document.documentElement.scrollWidth - window.innerWidth")


# The characters of an element's text after which the line breaks: a topic may break after a
# level's `/` (or a name's `-`), never inside a word such as `queue`.
BREAKS_AFTER = """el => {
  const out = [];
  let last = null, previous = "";
  const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (let i = 0; i < node.length; i++) {
      const range = document.createRange();
      range.setStart(node, i);
      range.setEnd(node, i + 1);
      const rect = range.getBoundingClientRect();
      if (last !== null && rect.top > last + 2) out.push(previous);
      last = rect.top;
      previous = node.data[i];
    }
  }
  return out;
}"""


def test_pages_fit_1280x800_with_figures_in_cards_and_log_out_in_sight(
    live_server, acme_walk, page, artifacts
):
    url = live_server.url
    page.set_viewport_size(DESKTOP)
    log_in(page, url, "me@acme.io", PASSWORD)

    # The dashboard: every figure inside its card, a busy tenant's too.
    page.evaluate(
        """() => document.querySelectorAll('[data-sys], [data-live]').forEach(
             e => { e.textContent = '1,234,567,890'; })"""
    )
    page.screenshot(path=str(artifacts / "walk-dashboard.png"))
    spilled = page.evaluate(
        """() => [...document.querySelectorAll('.card dd')].filter(dd => {
             const card = dd.closest('.card').getBoundingClientRect();
             const box = dd.getBoundingClientRect();
             return box.left < card.left || box.right > card.right;
           }).map(dd => dd.previousElementSibling.textContent)"""
    )
    assert spilled == [], f"figures outside their card: {spilled}"
    covered = page.evaluate(
        """() => [...document.querySelectorAll('.card dt')].filter(
             dt => dt.scrollWidth > dt.clientWidth + 1).map(dt => dt.textContent)"""
    )
    assert covered == [], f"figures over their names: {covered}"

    # The journey: a topic breaks between its levels, if at all.
    page.goto(f"{url}/journey/")
    page.screenshot(path=str(artifacts / "walk-journey.png"))
    for topic in ("queue/fill", DEEP_TOPIC):
        cell = page.locator(f'#journey-rows tr[data-topic="{topic}"] td.topic')
        expect(cell).to_have_text(topic)
        breaks = cell.evaluate(BREAKS_AFTER)
        assert set(breaks) <= {"/", "-"}, f"{topic} broken inside a word after {breaks}"
    short = page.locator('#journey-rows tr[data-topic="queue/fill"] td.topic').evaluate(
        BREAKS_AFTER
    )
    assert short == [], "queue/fill fits on one line"

    # Every page of the navigation: no wider than the window, Log out in the first 800 px.
    paths = page.locator("header.site nav a").evaluate_all(
        "links => links.map(a => a.getAttribute('href'))"
    )
    paths = [p for p in paths if p.startswith("/") and not p.startswith("/api/")]
    assert "/audit/" in paths
    too_wide, out_of_sight = [], []
    for path in paths:
        page.goto(url + path)
        page.wait_for_load_state("load")
        if _overflow(page) > 0:
            too_wide.append(f"{path} by {_overflow(page)} px")
        box = page.get_by_role("button", name="Log out").bounding_box()
        if box is None or box["y"] + box["height"] > DESKTOP["height"]:
            out_of_sight.append(path)
        if path == "/audit/":
            page.screenshot(path=str(artifacts / "walk-audit.png"))
    assert too_wide == [], "wider than 1280 px"
    assert out_of_sight == [], "Log out below the fold"
    expect(page.locator("header.site .account .who")).to_contain_text("me@acme.io")


def test_every_link_on_the_usage_page_answers(live_server, acme_walk, page, artifacts):
    url = live_server.url
    page.set_viewport_size(DESKTOP)
    log_in(page, url, "me@acme.io", PASSWORD)
    page.goto(f"{url}/usage/")
    page.screenshot(path=str(artifacts / "walk-usage.png"), full_page=True)
    rows = page.locator("#per-device tbody tr")
    expect(rows).to_have_count(6)
    claim = page.locator('#per-device tr[data-device="$claim"] td').first
    expect(claim).to_contain_text("claim certificate")
    hrefs = page.locator("main a[href]").evaluate_all(
        "links => links.map(a => a.getAttribute('href'))"
    )
    assert "/provisioning/" in hrefs  # the claim's row leads to the claims
    dead = []
    for href in sorted(set(hrefs)):
        if href.startswith("#"):
            continue
        target = href if href.startswith("http") else url + href
        answer = page.request.get(target)
        if answer.status != 200:
            dead.append(f"{href}: {answer.status}")
    assert dead == []
    retired = page.locator('#per-device tr[data-device="retired-1"] td').first
    expect(retired).to_contain_text("retired-1 (deleted)")


def test_run_over_history_shows_and_takes_iso_8601_utc(live_server, acme_walk, page, artifacts):
    url = live_server.url
    page.set_viewport_size(DESKTOP)
    log_in(page, url, "me@acme.io", PASSWORD)
    sent: list[dict] = []

    def preview(route):
        sent.append(json.loads(route.request.post_data))
        route.fulfill(
            status=200,
            content_type="application/json",
            body=json.dumps({"read": 0, "considered": 0, "matched": 0, "failed": 0, "outputs": []}),
        )

    page.route("**/api/v1/rules/hot/runs", preview)
    page.goto(f"{url}/rules/hot/")
    start, end = page.locator("#history-from"), page.locator("#history-to")
    page.locator("#history").screenshot(path=str(artifacts / "walk-history.png"))
    iso = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")
    for field in (start, end):
        assert field.evaluate("e => e.type") == "text"  # not the local date picker
        assert iso.match(field.input_value()), field.input_value()
    history = page.locator("#history")
    expect(history.locator("label[for=history-from], label:has(#history-from)")).to_contain_text(
        "UTC"
    )
    expect(history).to_contain_text("ISO 8601")

    start.fill("2026-12-01T08:00:00Z")
    end.fill("2026-12-01 09:30")
    page.click("#history-preview")
    expect(page.locator("#history-preview-result")).to_be_visible()
    assert sent[-1]["from"] == "2026-12-01T08:00:00Z"
    assert sent[-1]["to"] == "2026-12-01T09:30:00Z"

    start.fill("2026-12-01 08:00:00 UTC")
    end.fill("2026-12-01T10:00:00+01:00")
    page.click("#history-preview")
    page.wait_for_timeout(300)
    assert sent[-1]["from"] == "2026-12-01T08:00:00Z"
    assert sent[-1]["to"] == "2026-12-01T10:00:00+01:00"

    count = len(sent)
    start.fill("01/12/2026, 08:00")
    page.click("#history-preview")
    expect(page.locator("#history-error")).to_contain_text("ISO 8601")
    assert len(sent) == count  # nothing sent


def test_the_browser_client_connects_without_a_policy_violation(platform, acme_walk, page):  # noqa: F811
    url, _ = platform
    problems: list[str] = []
    page.on(
        "console",
        lambda m: problems.append(f"{page.url}: {m.text}") if m.type == "error" else None,
    )
    page.on("pageerror", lambda exc: problems.append(f"{page.url}: {exc}"))
    log_in(page, url, "me@acme.io", PASSWORD)
    page.goto(f"{url}/client/")
    page.click("#connect-button")
    page.wait_for_selector("#client-state:text-is('connected')")
    page.wait_for_timeout(1500)  # MQTT.js starts its keep-alive timer after CONNACK
    assert problems == []
    # Only this page may start a worker from a blob: URL; the rest keep the strict policy.
    client_policy = page.request.get(f"{url}/client/").headers["content-security-policy"]
    assert "worker-src 'self' blob:" in client_policy
    for path in ("/", "/devices/", "/rules/hot/"):
        assert "blob:" not in page.request.get(url + path).headers["content-security-policy"]


def test_the_tls_endpoint_and_aws_sdk_snippet_and_which_ca_trusts_the_broker(
    live_server, acme_walk, page, artifacts, settings
):
    settings.MQTT_PUBLIC_TLS_PORT = 8883
    url = live_server.url
    page.set_viewport_size(DESKTOP)
    log_in(page, url, "me@acme.io", PASSWORD)
    expect(page.locator("#connect-tls")).to_have_text("mqtts://127.0.0.1:8883")
    page.screenshot(path=str(artifacts / "walk-dashboard-tls.png"))

    page.goto(f"{url}/start/?device=sensor-1")
    expect(page.locator("main")).to_contain_text("mqtts://127.0.0.1:8883")
    page.click("[data-tab=awsiotsdk]")
    snippet = page.locator("#snippet-awsiotsdk")
    expect(snippet).to_be_visible()
    code = snippet.text_content()
    assert "mqtt_connection_builder.mtls_from_path(" in code
    for part in (
        'endpoint="127.0.0.1"',
        "port=8883",
        'cert_filepath="sensor-1.pem.crt"',
        'pri_key_filepath="sensor-1.private.key"',
        'ca_filepath="broker-ca.pem"',
        'client_id="sensor-1"',
    ):
        assert part in code, part
    compile(code, "awsiotsdk-snippet", "exec")  # pasted into a file, it is Python
    page.screenshot(path=str(artifacts / "walk-start-awsiotsdk.png"), full_page=True)

    # A claim: its signer's CA is for the records, and the page says what trusts the broker.
    page.goto(f"{url}/provisioning/factory/")
    page.click("#claim-create button[type=submit]")
    issued = page.locator("#claim-issued")
    expect(issued).to_be_visible()
    downloads = issued.locator("a[download]").evaluate_all(
        "links => links.map(a => a.getAttribute('download'))"
    )
    assert "fleet-ca.pem" not in downloads
    assert "broker-ca.pem" not in downloads  # that file is not this one
    expect(issued.locator("#broker-trust")).to_contain_text("broker-ca.pem")
    page.screenshot(path=str(artifacts / "walk-claim.png"), full_page=True)


def test_no_tls_endpoint_is_shown_without_one(live_server, acme_walk, page, settings):
    settings.MQTT_PUBLIC_TLS_PORT = None
    log_in(page, live_server.url, "me@acme.io", PASSWORD)
    expect(page.locator("#connect-tls")).to_contain_text("not offered")

"""The rule editor in headless Chromium against a live server: log in, type SQL and a sample
payload, see the dry run's output; break the SQL, see the error marked at its line and column;
save the rule, find it listed, and watch its counters arrive as the jobs write them. Screenshots
go to the test artifacts directory."""

import json
import os

import pytest
from playwright.sync_api import expect

from tenants.accounts import services as account_services
from tenants.models import Rule, RuleMetrics

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop


def test_rule_editor_dry_run_output_error_position_and_save(live_server, page, artifacts):
    account_services.signup(
        tenant="acme-rules", email="rules@acme.io", password="a long passphrase"
    )
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=email]", "rules@acme.io")
    page.fill("input[name=password]", "a long passphrase")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")

    page.click("header >> text=Rules")
    page.click("text=New rule")
    page.wait_for_load_state("load")  # rules.js listens for the edits below
    page.fill("#id_name", "hot")
    page.fill(
        "#id_sql",
        "SELECT payload.temp AS t, topic(2) AS room, clientid\n"
        'FROM "sensors/+/temp"\nWHERE payload.temp > 30',
    )
    page.fill("#sample-topic", "sensors/kitchen/temp")
    page.fill("#sample-clientid", "dev-7")
    page.fill("#sample-payload", '{"temp": 42.5}')
    output = page.locator("#test-output")
    # Waits without evaluating strings in the page: the portal's CSP forbids eval.
    expect(output).to_have_attribute("data-match", "true")
    expect(output).to_contain_text("42.5")
    assert json.loads(output.text_content()) == [
        {"t": 42.5, "room": "kitchen", "clientid": "dev-7"}
    ]
    page.screenshot(path=str(artifacts / "rule-editor-output.png"), full_page=True)

    # A cold reading: the WHERE does not hold.
    page.fill("#sample-payload", '{"temp": 12}')
    expect(output).to_have_attribute("data-match", "false")
    assert "No match" in output.text_content()

    # Break the SQL on line 2: the error names the problem and marks where.
    page.fill("#id_sql", 'SELECT payload.temp AS t\nFORM "sensors/+/temp"')
    error = page.locator("#test-error")
    error.wait_for(state="visible")
    where = page.locator("#test-error-where")
    assert "line 2" in error.text_content()
    assert where.is_visible() and where.text_content().startswith("line 2, column ")
    assert 'FORM "sensors/+/temp"' in where.text_content() and "^" in where.text_content()
    assert "invalid" in (page.get_attribute("#id_sql", "class") or "")
    page.screenshot(path=str(artifacts / "rule-editor-error.png"), full_page=True)
    # The caret line is not wrapped: it keeps the SQL line's columns.
    assert where.evaluate("e => getComputedStyle(e).whiteSpace") == "pre"

    # Fixed in place, the error goes: only the new output shows.
    page.fill("#id_sql", 'SELECT payload.temp AS t\nFROM "sensors/+/temp"')
    expect(output).to_have_attribute("data-match", "true")
    expect(error).to_be_hidden()
    expect(where).to_be_hidden()
    assert "invalid" not in (page.get_attribute("#id_sql", "class") or "")

    # Saving it broken is refused with the same position; fixing it saves.
    page.fill("#id_sql", 'SELECT payload.temp AS t\nFORM "sensors/+/temp"')
    error.wait_for(state="visible")
    page.click("text=Save rule")
    page.wait_for_selector("#rule-form[data-line='2']")
    assert not Rule.objects.exists()
    page.fill("#id_sql", 'SELECT payload.temp AS t FROM "sensors/+/temp" WHERE payload.temp > 30')
    page.fill("#id_actions", '[{"type": "republish", "topic": "alerts/${clientid}"}]')
    page.click("text=Save rule")
    page.wait_for_url(f"{live_server.url}/rules/hot/")
    assert Rule.objects.get(name="hot").actions == [
        {"type": "republish", "topic": "alerts/${clientid}"}
    ]
    page.click("text=← Rules")
    expect(page.locator("#rules a", has_text="hot")).to_have_count(1)  # waits for the navigation
    row = page.locator('tr[data-rule="hot"]')
    assert row.locator('[data-metric="matched"]').text_content() == "0"

    # The jobs write counters; the open list page shows them without a reload.
    RuleMetrics.objects.create(
        rule=Rule.objects.get(name="hot"),
        matched=7,
        passed=5,
        failed=2,
        actions_ok=5,
        last_error="payload is not JSON",
        lag_ms=1200,
    )
    row.locator('[data-metric="matched"]', has_text="7").wait_for()
    assert row.locator('[data-metric="failed"]').text_content() == "2"
    assert row.locator('[data-metric="last_error"]').text_content() == "payload is not JSON"
    assert row.locator('[data-metric="lag_ms"]').text_content() == "1200 ms"
    page.screenshot(path=str(artifacts / "rules-list.png"), full_page=True)
    assert (artifacts / "rule-editor-output.png").stat().st_size > 10_000

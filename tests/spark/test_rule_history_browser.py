"""The rule page's "Run over history" in headless Chromium against a live server, as a tenant
does it: pick a range, preview (the counts and the first outputs, nothing fired), run it (on the
suite's Spark, as a Celery worker would), watch the progress bar reach the end and the figures,
and the webhook receiver get exactly what the run fired. Screenshots go to the artifacts."""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from playwright.sync_api import expect

from tenants.accounts import services as account_services
from tenants.rules import services as rule_services
from tenants.rules.runs import services as runs
from tests.spark.conftest import message, write_live

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop
SECRET = "whsec-history-browser-000000001"


def test_preview_then_run_over_history_in_the_portal(
    live_server, page, artifacts, spark, store, receiver, monkeypatch
):
    from tenants.rules.runs.execute import execute

    monkeypatch.setenv("OBJECT_STORE_URL", f"file://{store.root}")
    monkeypatch.setenv("MQTT_SERVICE_KEY", "history-browser-service-key")

    def dispatch(run) -> None:  # the worker: the Celery task's body on the suite's Spark
        def work() -> None:
            try:
                execute(run.id, spark=spark, store=store)
            finally:
                connection.close()

        threading.Thread(target=work, daemon=True).start()

    monkeypatch.setattr(runs, "dispatch", dispatch)
    tenant, _, _ = account_services.signup(
        tenant="acme-history", email="history@acme.io", password="a long passphrase"
    )
    rule_services.rule_create(
        tenant=tenant,
        name="hot",
        sql='SELECT payload.temp AS t, clientid FROM "sensors/+/temp" WHERE payload.temp > 30',
        actions=[{"type": "webhook", "url": receiver.url, "secret": SECRET}],
    )
    base = int((datetime.now(UTC) - timedelta(hours=2)).timestamp() * 1000)
    write_live(
        store,
        [
            message("acme-history", "sensors/k/temp", {"temp": t}, base + t, client_id="k1")
            for t in range(25, 40)
        ],
    )
    connection.close()

    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=email]", "history@acme.io")
    page.fill("input[name=password]", "a long passphrase")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    page.goto(f"{live_server.url}/rules/hot/")
    page.wait_for_load_state("load")
    card = page.locator("#history")
    run_button = page.locator("#history-run")
    expect(run_button).to_be_disabled()  # preview first

    page.click("#history-preview")
    result = page.locator("#history-preview-result")
    expect(result).to_have_attribute("data-matched", "9")
    assert card.locator('[data-figure="read"]').text_content() == "15"
    assert card.locator('[data-figure="considered"]').text_content() == "15"
    outputs = json.loads(page.locator("#history-outputs").text_content())
    assert outputs[0] == {"t": 31, "clientid": "k1"} and len(outputs) == 9
    assert receiver.calls == []  # a preview fires nothing
    page.screenshot(path=str(artifacts / "rule-history-preview.png"), full_page=True)

    # Changing the range asks for a new preview before a run.
    expect(run_button).to_be_enabled()
    previewed = page.input_value("#history-from")
    page.fill("#history-from", "2020-01-01T00:00:00")
    expect(run_button).to_be_disabled()
    page.fill("#history-from", previewed)
    expect(run_button).to_be_enabled()
    page.select_option("#history-actions", "all")
    run_button.click()
    progress = page.locator("#history-progress")
    expect(progress).to_be_visible()
    expect(progress).to_have_attribute("data-state", "done", timeout=60_000)
    assert page.locator("#history-bar").get_attribute("value") == "1"
    assert card.locator('[data-run="matched"]').text_content() == "9"
    assert card.locator('[data-run="actions"]').text_content() == "9 / 0 / 0"
    assert sorted(json.loads(c["body"])["t"] for c in receiver.wait(9, 10)) == list(range(31, 40))
    page.screenshot(path=str(artifacts / "rule-history-run.png"), full_page=True)

    # The page lists the run (server side) after a reload.
    page.reload()
    expect(page.locator("#history-runs tr[data-run-id]")).to_have_count(1)
    assert "done" in page.locator("#history-runs tr[data-run-id]").text_content()

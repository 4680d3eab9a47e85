"""The History page in headless Chromium: a tenant sees what its plan keeps by default, adds a
policy (a bad filter and days over its plan are refused in words), sees what its rules keep and
what it stores, and deletes the policy. Screenshots go to the test artifacts directory."""

import os
from datetime import UTC, datetime

import pytest
from playwright.sync_api import expect

from tenants.accounts import services as account_services
from tenants.models import HistoryPolicy, Usage
from tenants.rules import services as rule_services

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop
PASSWORD = "a long passphrase"


def test_a_tenant_keeps_a_topic_sees_its_storage_and_deletes_the_policy(
    live_server, page, artifacts, tmp_path, monkeypatch
):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    tenant, _, _ = account_services.signup(tenant="acme-hist", email="h@acme.io", password=PASSWORD)
    rule_services.rule_create(tenant=tenant, name="alarm", sql='SELECT * FROM "alarms/+"')
    part = tmp_path / "archive/tenant=acme-hist/date=2026-11-26/hour=10/part-0000-0000.parquet"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"x" * 3000)  # what the compaction left of an hour (its size is what counts)
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    Usage.objects.create(  # the hourly storage sample, as the sampler writes it
        tenant=tenant, minute=hour, stored_bytes=2_500_000_000, storage_byte_hours=2_500_000_000
    )
    page.goto(f"{live_server.url}/login/")
    page.fill("input[name=email]", "h@acme.io")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")

    page.click("header >> text=History")
    expect(page.locator("#plan-default")).to_contain_text("keeps nothing by default")
    expect(page.locator(".rule-feed")).to_contain_text("alarm reads alarms/+")
    expect(page.locator("#retention-days")).to_have_text("1 day")  # a day for its rule
    expect(page.locator("#history-bytes")).to_have_text("2.9 KiB")
    expect(page.locator("#stored-bytes")).to_have_text("2.3 GiB")
    expect(page.locator("#storage-gb-hours")).to_have_text("2.5000")

    page.fill("#id_topic_filter", "sensors/#/temperature")
    page.fill("#id_days", "1")
    page.click("text=Add policy")
    expect(page.locator("#history-add .error")).to_contain_text("Not a valid MQTT topic filter")
    page.fill("#id_topic_filter", "sensors/+/temperature")
    page.fill("#id_days", "30")
    page.click("text=Add policy")
    expect(page.locator("#history-add .error")).to_contain_text(
        "Your plan (Free) keeps history at most 1 day"
    )
    assert not HistoryPolicy.objects.exists()
    page.fill("#id_days", "1")
    page.click("text=Add policy")
    row = page.locator("#history-policies tbody tr").first
    expect(row).to_contain_text("sensors/+/temperature")
    expect(page.locator("#plan-default")).to_have_count(0)
    expect(page.locator("#own-policies")).to_be_visible()
    expect(page.locator("#history-storage")).to_contain_text(
        "the oldest from 2026-11-26 10:00:00 UTC"
    )
    page.screenshot(path=str(artifacts / "history-policy.png"), full_page=True)

    row.locator("text=delete").click()
    expect(page.locator("#history-policies")).to_contain_text("No history policies.")
    assert not HistoryPolicy.objects.exists()

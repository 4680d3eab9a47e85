"""People and money on the running platform: a member invited from the portal joins by the
mailed link and makes an API token that holds a viewer's rights only; a tenant's usage, its
forecast, a budget that alerts (webhook) and degrades (new connections refused by the broker,
back when the budget is raised), and the month's invoice issued by the operator's billing job
(Spark), fetched as JSON, CSV and PDF."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.broker.clients import Paho
from tests.e2e.conftest import Platform, eventually
from tests.spark.conftest import Receiver, signature_ok

pytestmark = pytest.mark.e2e
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs a loop


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def login(page, platform: Platform, email: str, password: str) -> None:
    page.goto(platform.url("/login/"))
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(platform.url("/"))


@pytest.mark.browser
def test_a_member_joins_by_invitation_and_their_token_has_their_rights(
    platform: Platform, tenant: dict[str, Any], page
):
    invitee, password = "viewer@e2e-acme.io", "a long viewer passphrase"
    login(page, platform, tenant["email"], tenant["password"])
    page.goto(platform.url("/members/"))
    form = page.locator("#invite-form")
    form.locator("input[name=email]").fill(invitee)
    form.locator("select[name=role]").select_option("viewer")
    form.locator("button[type=submit]").click()
    page.wait_for_load_state()
    assert f"Invitation sent to {invitee}" in page.inner_text("main")
    link = platform.mail_link(invitee, "/invite/")
    page.click("text=Log out")
    page.goto(link)
    page.fill("input[name=password]", password)
    page.click("#accept")
    page.wait_for_load_state()
    assert "Welcome to" in page.inner_text("main")

    # The member's own API token (their email and password) holds a viewer's rights only.
    answer = platform.api().post("/api/v1/auth/token", {"email": invitee, "password": password})
    assert answer.status_code == 200, answer.text
    viewer = platform.api(answer.json()["token"])
    assert viewer.get("/api/v1/devices").status_code == 200
    refused = viewer.post("/api/v1/devices", {"name": "not-mine-to-make"})
    assert refused.status_code == 403, refused.text

    # The owner makes a token for a script in the portal, and deletes it: it stops at once.
    page.click("text=Log out")
    login(page, platform, tenant["email"], tenant["password"])
    page.goto(platform.url("/tokens/"))
    page.fill("input[name=name]", "ci script")
    page.click("text=Create token")
    token = page.locator("#new-token").inner_text().strip()
    script = platform.api(token)
    assert script.post("/api/v1/devices", {"name": "made-by-script"}).status_code == 201
    page.locator("tr", has_text="ci script").locator("text=delete").click()
    page.wait_for_load_state()
    assert script.get("/api/v1/devices").status_code == 401


def test_usage_forecast_budget_degrade_and_the_invoice(platform: Platform, receiver):
    signed = platform.api().post(
        "/api/v1/signup",
        {"tenant": "e2e-spend", "email": "owner@e2e-spend.io", "password": "a long spend phrase"},
    )
    assert signed.status_code == 201, signed.text
    api = platform.api(signed.json()["token"])
    made = api.post("/api/v1/devices", {"name": "meter", "client_id_policy": "any"})
    assert made.status_code == 201, made.text
    user, secret = made.json()["username"], made.json()["password"]
    port = platform.port("MQTT_PORT")
    meter = Paho(port, user, secret, "meter")
    for n in range(20):
        meter.publish("meters/1", json.dumps({"kwh": n}), 1)
    meter.close()

    today = datetime.now(UTC).strftime("%Y-%m-%dT00:00:00Z")
    usage = eventually(
        lambda: api.get("/api/v1/usage", params={"from": today, "granularity": "day"}).json(),
        lambda body: sum(p["publishes_in"] for p in body["series"]) >= 20,
        within=150,  # the broker's usage minutes reach Postgres when their minute ends
    )
    assert sum(p["messages"] for p in usage["series"]) >= 20
    forecast = api.get("/api/v1/usage/forecast")
    assert forecast.status_code == 200, forecast.text
    assert forecast.json()["method"] and forecast.json()["forecast_cents"] >= 0

    # On Pro (49 USD a month, counted from the 1st), a budget of 1 USD is spent already.
    moved = platform.manage("set_plan", "e2e-spend", "pro")
    assert moved.returncode == 0, moved.stderr
    budget = api.put(
        "/api/v1/budget",
        {
            "monthly_cents": 100,
            "thresholds": [50, 100],
            "at_limit": "degrade",
            "webhook_url": receiver.url,
        },
    )
    assert budget.status_code == 200, budget.text
    hook_secret = budget.json()["webhook_secret"]
    calls = receiver.wait(2, 90)  # Celery beat's checks (BUDGET_CHECK_SECONDS)
    events = [json.loads(call["body"]) for call in calls]
    assert sorted(e["threshold"] for e in events) == [50, 100], events
    assert all(signature_ok(call, hook_secret) for call in calls)
    assert eventually(lambda: api.get("/api/v1/budget").json(), lambda b: b["degraded"])
    refused = Paho(port, user, secret, "meter")
    assert refused.reason_code == 0x97, refused.reason_code
    refused.stop_loop()
    raised = api.put("/api/v1/budget", {"monthly_cents": 1_000_000, "at_limit": "degrade"})
    assert raised.status_code == 200, raised.text

    def connects() -> bool:
        client = Paho(port, user, secret, "meter")
        client.stop_loop()
        return client.reason_code == 0

    assert eventually(connects, bool, within=30)

    period = datetime.now(UTC).strftime("%Y-%m")
    billed = platform.manage(
        "billing_report", "--period", period, "--tenant", "e2e-spend", "--issue", "--force"
    )
    assert billed.returncode == 0, billed.stderr[-3000:]
    invoice = api.get(f"/api/v1/invoices/{period}")
    assert invoice.status_code == 200, invoice.text
    lines = {line["code"]: line for line in invoice.json()["lines"]}
    assert lines["base_fee"]["amount_cents"] > 0
    assert invoice.json()["total_cents"] == sum(x["amount_cents"] for x in lines.values())
    csv = api.get(f"/api/v1/invoices/{period}.csv")
    assert csv.status_code == 200 and "base_fee" in csv.text, csv.text[:500]
    pdf = api.get(f"/api/v1/invoices/{period}.pdf")
    assert pdf.status_code == 200 and pdf.content.startswith(b"%PDF"), pdf.content[:100]

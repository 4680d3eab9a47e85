"""Budgets and alerts (issue 33, point 2): the month to date priced as the invoice prices it, a
threshold crossing sending one email and one signed webhook (a real HTTP receiver), once per
threshold per month however many checks run (one after another, or two at once), quota nearing
alerting the same way, the REST API's 4xx naming each problem, and the portal page."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from datetime import UTC, datetime

import pytest
from django.core import mail
from django.db import connection

from tenants.accounts import services as account_services
from tenants.billing.periods import period_bounds
from tenants.budgets.alerts import check_all
from tenants.budgets.selectors import month_to_date_spend
from tenants.devices import services as device_services
from tenants.models import BudgetAlert, Credit, Tenant, Usage
from tenants.tenant import services as tenant_services
from tests.api.conftest import acme, attacker, client_for  # noqa: F401 (fixtures)
from tests.spark.conftest import Receiver


@pytest.fixture
def receiver(monkeypatch):
    monkeypatch.setenv("WEBHOOK_ALLOW", "127.0.0.1")  # as an operator allows a local receiver
    server = Receiver()
    yield server
    server.close()


def metered(tenant: Tenant, message_units: int) -> None:
    """Message units metered this month (the free plan includes 1,000,000, then 1.00 USD per
    million: 1,600,000 cost 60 cents)."""
    start, _ = period_bounds(datetime.now(UTC).strftime("%Y-%m"))
    row, _ = Usage.objects.get_or_create(tenant=tenant, minute=start)
    row.message_units += message_units
    row.save()


def run_twice_at_once() -> None:
    """Two checks at the same moment, each on its own database connection (two workers)."""
    barrier = threading.Barrier(2)

    def one() -> None:
        barrier.wait()
        try:
            check_all()
        finally:
            connection.close()

    threads = [threading.Thread(target=one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def signed(call: dict, secret: str) -> bool:
    digest = hmac.new(secret.encode(), call["body"], hashlib.sha256).hexdigest()
    return call["headers"].get("X-Signature-256") == f"sha256={digest}"


@pytest.mark.django_db(transaction=True)  # two checks at once, on two connections
def test_a_crossing_sends_one_email_and_one_signed_webhook_once_per_threshold(
    acme,  # noqa: F811
    receiver,
):
    tenant, api = acme
    answer = api.put(
        "/api/v1/budget", {"monthly_cents": 100, "webhook_url": receiver.url}, format="json"
    )
    assert answer.status_code == 200, answer.content
    body = answer.json()
    secret = body["webhook_secret"]
    assert body["thresholds"] == [50, 80, 100] and body["at_limit"] == "notify"
    assert body["spend_cents"] == 0 and body["percent"] == 0 and body["alerts"] == []
    assert "webhook_secret" not in api.get("/api/v1/budget").json()  # shown once

    metered(tenant, 1_600_000)  # 60 cents: past 50 %; and 80 % of the included messages
    check_all()
    check_all()  # again: nothing new
    assert sorted(m.subject for m in mail.outbox) == [
        "acme: 50 % of the monthly budget (0.60 USD of 1.00 USD)",
        "acme: 80 % of the month's included messages",
    ]
    assert all(m.to == ["owner@acme.io"] for m in mail.outbox)
    [budget_mail] = [m for m in mail.outbox if "budget" in m.subject]
    assert "spent 0.60 USD of its monthly budget of 1.00 USD" in budget_mail.body
    assert "/budget/" in budget_mail.body  # where to see it and change it
    calls = receiver.wait(2, timeout=5)
    assert len(receiver.calls) == 2 and all(signed(call, secret) for call in calls)
    payloads = {json.loads(call["body"])["event"]: json.loads(call["body"]) for call in calls}
    budget_call = payloads["budget.threshold"]
    assert budget_call["threshold"] == 50 and budget_call["tenant"] == "acme"
    assert (budget_call["spend_cents"], budget_call["budget_cents"]) == (60, 100)
    assert budget_call["currency"] == "USD" and budget_call["degraded"] is False
    quota_call = payloads["quota.nearing"]
    assert (quota_call["quota"], quota_call["used"], quota_call["limit"]) == (
        "included_messages",
        1_600_000,
        1_000_000,
    )
    assert {call["headers"]["X-Event"] for call in calls} == {"budget.threshold", "quota.nearing"}

    metered(tenant, 500_000)  # 110 cents: past 80 % and 100 %, with two checks at once
    run_twice_at_once()
    check_all()
    budget_mails = sorted(m.subject for m in mail.outbox if "budget" in m.subject)
    assert budget_mails == [
        "acme: 100 % of the monthly budget (1.10 USD of 1.00 USD)",
        "acme: 50 % of the monthly budget (0.60 USD of 1.00 USD)",
        "acme: 80 % of the monthly budget (1.10 USD of 1.00 USD)",
    ]
    receiver.wait(4, timeout=5)
    thresholds = sorted(
        json.loads(c["body"]).get("threshold")
        for c in receiver.calls
        if json.loads(c["body"])["event"] == "budget.threshold"
    )
    assert thresholds == [50, 80, 100] and len(receiver.calls) == 4
    assert not Tenant.objects.get(id=tenant.id).budget_degraded  # notify: nothing refused

    shown = api.get("/api/v1/budget").json()
    assert shown["spend_cents"] == 110 and shown["percent"] == 110.0
    sent = {(a["kind"], a["threshold"]): a for a in shown["alerts"]}
    assert set(sent) == {
        ("budget", 50),
        ("budget", 80),
        ("budget", 100),
        ("included_messages", 80),
    }
    assert all(a["email_sent_at"] and a["webhook_sent_at"] for a in sent.values())
    assert "1.10 USD of its monthly budget of 1.00 USD" in sent[("budget", 100)]["message"]

    # A raised budget has thresholds of its own; the same month's old ones are not repeated.
    api.put("/api/v1/budget", {"monthly_cents": 200, "webhook_url": receiver.url}, format="json")
    check_all()
    assert BudgetAlert.objects.filter(tenant=tenant, kind="budget").count() == 4  # 50 % of 2.00
    assert len([m for m in mail.outbox if "budget" in m.subject]) == 4


def test_a_connection_limit_nearing_alerts_once(acme):  # noqa: F811
    from tenants.models import DeviceConnection

    tenant, api = acme
    tenant_services.tenant_set_quota(tenant, {"max_connections": 5})
    device, _ = device_services.device_create(tenant=tenant, name="d1")
    now = datetime.now(UTC)
    for i in range(4):  # 4 of 5: 80 %
        DeviceConnection.objects.create(
            tenant=tenant,
            device=device,
            client_id=f"c{i}",
            connection_key=f"k{i}",
            broker="node-a",
            address="127.0.0.1",
            protocol_version=5,
            connected_at=now,
            heartbeat_at=now,
        )
    check_all()
    check_all()
    assert [m.subject for m in mail.outbox] == ["acme: 80 % of the connection limit"]
    assert "4 devices connected of the 5 its plan allows" in mail.outbox[0].body
    [alert] = api.get("/api/v1/budget/alerts").json()["results"]
    assert (alert["kind"], alert["value"], alert["limit"]) == ("max_connections", 4, 5)


def test_month_to_date_is_priced_as_the_invoice(acme):  # noqa: F811
    """A tenant moved from free to pro on 15 September, with a credit: the base fee is
    prorated by days (16 of 30 days of 49.00 = 26.13), usage priced at pro's 1.00 per million
    (2.50), the credit taken off (1.00): 27.63, to the cent."""
    tenant, _ = acme
    Tenant.objects.filter(id=tenant.id).update(created_at=datetime(2026, 1, 5, tzinfo=UTC))
    tenant.refresh_from_db()
    tenant_services.tenant_change_plan(tenant, "pro", at=datetime(2026, 9, 15, tzinfo=UTC))
    Usage.objects.create(
        tenant=tenant, minute=datetime(2026, 9, 10, tzinfo=UTC), message_units=2_500_000
    )
    Usage.objects.create(  # October: not this month
        tenant=tenant, minute=datetime(2026, 10, 1, tzinfo=UTC), message_units=9_000_000
    )
    Credit.objects.create(tenant=tenant, period="2026-09", amount_cents=100, reason="goodwill")
    spend = month_to_date_spend(tenant=tenant, now=datetime(2026, 9, 20, tzinfo=UTC))
    amounts = [
        (line["code"], line["amount_cents"]) for line in spend["lines"] if line["amount_cents"]
    ]
    assert amounts == [("base_fee", 2613), ("messages", 250), ("credit", -100)]
    assert spend["spend_cents"] == 2763 and spend["currency"] == "USD"


def test_budget_api_names_each_problem_and_keeps_tenants_apart(acme, attacker):  # noqa: F811
    tenant, api = acme
    empty = api.get("/api/v1/budget").json()
    assert empty["monthly_cents"] is None and empty["thresholds"] == [50, 80, 100]

    def problem(body: dict) -> tuple[int, dict]:
        answer = api.put("/api/v1/budget", body, format="json")
        return answer.status_code, answer.json()["error"].get("fields", {})

    status, fields = problem({"thresholds": [50]})
    assert status == 400 and "monthly_cents" in fields
    status, fields = problem({"monthly_cents": "lots"})
    assert status == 400 and "whole number of cents" in fields["monthly_cents"][0]
    status, fields = problem({"monthly_cents": 500, "thresholds": [50, 0]})
    assert status == 400 and "not 0" in fields["thresholds"][0]
    status, fields = problem({"monthly_cents": 500, "at_limit": "degrade", "thresholds": [80]})
    assert status == 400 and "include 100" in fields["thresholds"][0]
    status, fields = problem({"monthly_cents": 500, "at_limit": "stop"})
    assert status == 400 and "notify or degrade" in fields["at_limit"][0]
    status, fields = problem({"monthly_cents": 500, "webhook_url": "http://127.0.0.1:9/x"})
    assert status == 400 and "webhook_url" in fields  # loopback, not allowed by the operator
    status, fields = problem({"monthly_cents": 500, "limit": 3})
    assert status == 400 and "Not a budget field" in fields["limit"][0]

    assert api.put("/api/v1/budget", {"monthly_cents": 500}, format="json").status_code == 200
    _, evil = attacker
    assert evil.get("/api/v1/budget").json()["monthly_cents"] is None  # its own, unset
    assert evil.get("/api/v1/budget/alerts").json()["count"] == 0
    assert api.get("/api/v1/budget").json()["monthly_cents"] == 500

    viewer = account_services.signup(tenant="viewers", email="v@acme.io", password="pass-w0rd-v")[1]
    from tenants.models import Membership

    Membership.objects.create(user=viewer, tenant=tenant, role="viewer")
    _, token = account_services.api_token_create(user=viewer, tenant=tenant, name="ro")
    reader = client_for(token)
    assert reader.get("/api/v1/budget").json()["monthly_cents"] == 500
    assert reader.put("/api/v1/budget", {"monthly_cents": 1}, format="json").status_code == 403
    assert reader.delete("/api/v1/budget").status_code == 403
    assert api.delete("/api/v1/budget").status_code == 204
    assert api.get("/api/v1/budget").json()["monthly_cents"] is None


def test_portal_budget_page_sets_it_and_shows_the_month_and_alerts(acme, client):  # noqa: F811
    tenant, _ = acme
    client.login(username="owner@acme.io", password="pass-w0rd-acme")
    page = client.get("/budget/").content.decode()
    assert 'id="no-budget"' in page and "0.00 USD" in page
    answer = client.post(
        "/budget/",
        {"amount": "1.00", "thresholds": "50, 80, 100", "at_limit": "degrade", "webhook_url": ""},
    )
    assert answer.status_code == 302
    metered(tenant, 2_000_000)  # 1.00 USD: 100 %
    check_all()
    page = client.get("/budget/").content.decode()
    assert '1.00 USD</strong> of <strong id="budget-amount">1.00 USD' in page
    assert 'id="degraded"' in page  # new connections refused, said at the top
    assert 'data-kind="budget" data-threshold="100"' in page
    assert "sent to owner@acme.io" in page
    bad = client.post("/budget/", {"amount": "1.005", "thresholds": "50", "at_limit": "notify"})
    assert "at most two decimals" in bad.content.decode()
    client.post("/budget/", {"amount": "5.00", "thresholds": "50, 100", "at_limit": "notify"})
    assert not Tenant.objects.get(id=tenant.id).budget_degraded  # lifted at once

"""Usage and invoices over the REST API: series per hour/day, invoice JSON, CSV and a real PDF
(read back with pdftotext), and another tenant's invoice is a 404."""

from __future__ import annotations

import csv
import io
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from common.stores.object_store import LocalObjectStore
from tenants.billing import services as billing
from tenants.models import Tenant, Usage
from tenants.tenant import services as tenant_services
from tests.api.conftest import acme, attacker  # noqa: F401 (fixtures)
from tests.billing.usage_rows import row, write_rows

SEPTEMBER = datetime(2026, 9, 1, tzinfo=UTC)


def test_usage_series_per_day_and_hour(acme, attacker):  # noqa: F811
    tenant, api = acme
    for minute, units in ((0, 3), (1, 4), (61, 5), (24 * 60 + 5, 7)):
        Usage.objects.create(
            tenant=tenant,
            minute=SEPTEMBER + timedelta(minutes=minute),
            message_units=units,
            connection_minutes=2,
            storage_byte_hours=500_000_000 * units,
        )
    body = api.get("/api/v1/usage?from=2026-09-01&to=2026-09-03&granularity=day").json()
    assert body["granularity"] == "day"
    days = [(p["start"], p["messages"], p["connection_minutes"]) for p in body["series"]]
    assert days == [("2026-09-01T00:00:00Z", 12, 6), ("2026-09-02T00:00:00Z", 7, 2)]
    assert body["series"][0]["storage_gb_hours"] == 6.0
    hours = api.get(
        "/api/v1/usage?from=2026-09-01T00:00:00Z&to=2026-09-01T03:00:00Z&granularity=hour"
    ).json()["series"]
    assert [p["messages"] for p in hours] == [7, 5, 0]
    bad = api.get("/api/v1/usage?from=2026-09-01&granularity=week")
    assert bad.status_code == 400 and "granularity" in bad.json()["error"]["fields"]
    assert api.get("/api/v1/usage?from=yesterday&granularity=day").status_code == 400
    assert api.get("/api/v1/usage?from=2026-09-03&to=2026-09-01").status_code == 400
    _, evil = attacker
    theirs = evil.get("/api/v1/usage?from=2026-09-01&to=2026-09-03&granularity=day").json()
    assert [p["messages"] for p in theirs["series"]] == [0, 0]


@pytest.mark.django_db(transaction=True)
def test_invoice_json_csv_pdf_and_isolation(acme, attacker, spark, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    tenant, api = acme
    tenant_services.tenant_update_settings(tenant, name="Acme Sensors Ltd")
    Tenant.objects.filter(id=tenant.id).update(created_at=datetime(2026, 1, 5, tzinfo=UTC))
    write_rows(
        LocalObjectStore(tmp_path),
        [
            row("acme", SEPTEMBER + timedelta(days=d), messages=150_000, connection_minutes=1440)
            for d in range(30)
        ],
    )
    billing.billing_report("2026-09", tenant=tenant, issue=True)
    body = api.get("/api/v1/invoices/2026-09").json()
    lines = {line["code"]: line for line in body["lines"]}
    # The free plan: 1,000,000 messages included, then $1.00 per million → 3.5 M = $3.50.
    assert lines["messages"]["quantity"] == 4_500_000 and lines["messages"]["billable"] == 3_500_000
    assert lines["messages"]["amount_cents"] == 350
    assert body["total_cents"] == sum(line["amount_cents"] for line in body["lines"]) == 350
    assert set(lines) == {
        "base_fee",
        "messages",
        "connection_minutes",
        "rules_triggered",
        "actions_executed",
        "storage_gb_hours",
    }
    assert body["status"] == "issued" and len(body["checksum"]) == 64
    listed = api.get("/api/v1/invoices").json()["results"]
    assert [(i["period"], i["total_cents"]) for i in listed] == [("2026-09", 350)]

    response = api.get("/api/v1/invoices/2026-09.csv")
    assert response["Content-Type"].startswith("text/csv")
    table = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {r["code"]: int(r["amount_cents"]) for r in table}["messages"] == 350
    assert table[-1]["code"] == "total" and table[-1]["amount_cents"] == "350"

    pdf = api.get("/api/v1/invoices/2026-09.pdf")
    assert pdf["Content-Type"] == "application/pdf" and pdf.content.startswith(b"%PDF")
    (tmp_path / "invoice.pdf").write_bytes(pdf.content)
    text = subprocess.run(
        ["pdftotext", str(tmp_path / "invoice.pdf"), "-"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    text = " ".join(text.split())  # a label wrapped in its cell reads as one
    assert "Acme Sensors Ltd" in text and "Account acme" in text and "2026-09" in text
    assert "Messages (per million, 5 KB units)" in text and "4,500,000" in text
    assert "Total due" in text and "3.50 USD" in text
    assert "Invoice number" in text and body["number"] in text  # numbered when issued

    _, evil = attacker
    for suffix in ("", ".csv", ".pdf"):
        stolen = evil.get(f"/api/v1/invoices/2026-09{suffix}")
        assert stolen.status_code == 404, suffix
    assert evil.get("/api/v1/invoices").json()["count"] == 0
    assert api.get("/api/v1/invoices/2026-13").status_code == 404


def test_month_to_date_estimate_prices_this_months_minutes(acme):  # noqa: F811
    from tenants.billing.selectors import month_to_date_estimate

    tenant, _ = acme
    tenant_services.plan_get_or_create("pro")
    tenant.plan = tenant_services.plan_get_or_create("pro")
    tenant.save()
    now = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    Usage.objects.create(tenant=tenant, minute=now - timedelta(days=3), message_units=2_500_000)
    Usage.objects.create(tenant=tenant, minute=now - timedelta(days=25), message_units=9_999_999)
    estimate = month_to_date_estimate(tenant=tenant, now=now)  # October's minute is not counted
    lines = {line["code"]: line for line in estimate["lines"]}
    assert lines["messages"]["quantity"] == 2_500_000
    # Pro: $49 base; list price $1.00 per million messages (no free tier on a paid plan).
    assert estimate["total_cents"] == 4900 + 250 and estimate["period"] == "2026-11"


def test_portal_invoice_downloads_are_the_tenants_own(acme, attacker, client):  # noqa: F811
    from tenants.models import Invoice

    tenant, _ = acme
    Invoice.objects.create(
        tenant=tenant,
        period="2026-09",
        status="issued",
        total_cents=100,
        line_items=[
            {
                "code": "base_fee",
                "description": "Monthly base fee",
                "quantity": 1,
                "included": 0,
                "billable": 1,
                "unit_price": "1",
                "per": 1,
                "amount_cents": 100,
            }
        ],
    )
    client.login(username="owner@evil.io", password="pass-w0rd-evil")
    for suffix in ("csv", "pdf"):
        assert client.get(f"/invoices/2026-09.{suffix}").status_code == 404
    assert "2026-09" not in client.get("/invoices/").content.decode()
    client.logout()
    client.login(username="owner@acme.io", password="pass-w0rd-acme")
    assert client.get("/invoices/2026-09.csv").content.decode().splitlines()[-1].endswith(",100")


def test_tenants_never_see_drafts(acme, client):  # noqa: F811
    """A draft is the operators' until it is issued: not in the tenant's API list, its detail,
    CSV or PDF, nor the portal's Invoices page; issuing it makes it appear everywhere."""
    from tenants.models import Invoice

    tenant, api = acme
    line = {
        "code": "base_fee",
        "description": "Monthly base fee",
        "quantity": 1,
        "included": 0,
        "billable": 1,
        "unit_price": "1",
        "per": 1,
        "amount_cents": 4242,
    }
    draft = Invoice.objects.create(
        tenant=tenant, period="2026-10", status="draft", total_cents=4242, line_items=[line]
    )
    assert api.get("/api/v1/invoices").json()["count"] == 0
    for suffix in ("", ".csv", ".pdf"):
        assert api.get(f"/api/v1/invoices/2026-10{suffix}").status_code == 404, suffix
    client.login(username="owner@acme.io", password="pass-w0rd-acme")
    page = client.get("/invoices/").content.decode()
    assert "2026-10" not in page and "42.42" not in page
    for suffix in ("csv", "pdf"):
        assert client.get(f"/invoices/2026-10.{suffix}").status_code == 404

    draft.status = "issued"
    draft.save()
    assert [i["period"] for i in api.get("/api/v1/invoices").json()["results"]] == ["2026-10"]
    assert api.get("/api/v1/invoices/2026-10").json()["total_cents"] == 4242
    assert "2026-10" in client.get("/invoices/").content.decode()

"""Drafting on the 1st and issuing after the grace period (the Celery tasks, run in-process on
real Postgres and Spark), and the operator's admin: invoices by status, revenue per month."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings

from common.stores.object_store import LocalObjectStore
from tenants import tasks
from tenants.models import Invoice, Tenant
from tenants.tenant import services as tenant_services
from tests.billing.usage_rows import row, write_rows

pytestmark = pytest.mark.django_db(transaction=True)

SEPTEMBER = datetime(2026, 9, 1, tzinfo=UTC)


def test_beat_drafts_on_the_first_and_issues_after_grace(spark, tmp_path, monkeypatch, client):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    store = LocalObjectStore(tmp_path)
    tenant_services.tenant_create("acme", plan="pro")
    tenant_services.tenant_create("beta", plan="pro")
    Tenant.objects.update(created_at=datetime(2026, 1, 5, tzinfo=UTC))
    write_rows(store, [row("acme", SEPTEMBER + timedelta(days=2), messages=2_000_000)])
    schedule = settings.CELERY_BEAT_SCHEDULE
    assert schedule["billing-draft"]["task"] == "tenants.tasks.billing_draft_previous_month"
    assert schedule["billing-issue"]["task"] == "tenants.tasks.billing_issue_due"

    assert tasks.billing_draft_previous_month("2026-10-01") == {"period": "2026-09", "tenants": 2}
    drafts = Invoice.objects.filter(period="2026-09")
    assert {i.status for i in drafts} == {"draft"}
    acme_draft = drafts.get(tenant__slug="acme").total_cents
    # Pro: $49 + 2 M messages at $1.00 per million.
    assert acme_draft == 4900 + 200

    # A broker's late September minutes arrive inside the grace period: billed in place.
    write_rows(store, [row("acme", SEPTEMBER + timedelta(days=29), messages=1_000_000)], "late")
    assert tasks.billing_issue_due("2026-10-02")["waiting"] is True
    assert {i.status for i in Invoice.objects.filter(period="2026-09")} == {"draft"}
    assert tasks.billing_issue_due("2026-10-04") == {
        "period": "2026-09",
        "issued": 2,
        "waiting": False,
    }
    issued = Invoice.objects.get(tenant__slug="acme", period="2026-09")
    assert issued.status == "issued" and issued.issued_at is not None
    assert issued.total_cents == 4900 + 300
    assert not any(line["code"] == "adjustment" for line in issued.line_items)
    assert tasks.billing_issue_due("2026-10-05")["issued"] == 0  # nothing left to issue

    from django.contrib.auth import get_user_model

    admin = get_user_model().objects.create_superuser(
        "ops@example.com", "ops@example.com", "pw-ops-123"
    )
    client.force_login(admin)
    page = client.get("/admin/tenants/invoice/?status__exact=issued")
    assert page.status_code == 200
    html = page.content.decode()
    assert "Revenue per month" in html and "52.00" in html and "49.00" in html
    revenue = page.context["revenue"][0]
    assert revenue == {
        "period": "2026-09",
        "currency": "USD",
        "tenants": 2,
        "total_cents": 5200 + 4900,
        "by_status": {"issued": 5200 + 4900},
    }

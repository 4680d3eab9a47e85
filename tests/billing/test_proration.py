"""The base fee prorated by days for a tenant that starts, or changes plan, during the period:
the Spark job's invoices against an independent computation (fractions, half-up by hand)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from fractions import Fraction

import pytest

from tenants.billing import services as billing
from tenants.models import Invoice, Tenant
from tenants.tenant import services as tenant_services

pytestmark = pytest.mark.django_db(transaction=True)


def half_up_cents(fee_cents: int, days: int, period_days: int) -> int:
    exact = Fraction(fee_cents * days, period_days)
    return int(exact) + (1 if exact - int(exact) >= Fraction(1, 2) else 0)


def prices(plan: str, fee: int) -> None:
    billing.price_book_set(
        tenant_services.plan_get_or_create(plan),
        effective_from=date(2026, 1, 1),
        base_fee_cents=fee,
        dimensions={
            "messages": {"included": 0, "per": 1, "tiers": [{"up_to": None, "price": "0"}]}
        },
    )


def test_base_fee_prorated_by_days(tmp_path, monkeypatch, spark):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    prices("free", 1001)  # odd amounts so that rounding shows
    prices("pro", 4999)
    late = tenant_services.tenant_create("late", plan="pro")
    mover = tenant_services.tenant_create("mover", plan="free")
    steady = tenant_services.tenant_create("steady", plan="free")
    Tenant.objects.filter(id=late.id).update(created_at=datetime(2026, 9, 10, 23, 59, tzinfo=UTC))
    Tenant.objects.exclude(id=late.id).update(created_at=datetime(2026, 1, 5, tzinfo=UTC))
    mover.refresh_from_db()
    tenant_services.tenant_change_plan(mover, "pro", at=datetime(2026, 9, 21, 0, 30, tzinfo=UTC))
    steady.refresh_from_db()
    tenant_services.tenant_change_plan(
        steady, "pro", at=datetime(2026, 10, 5, tzinfo=UTC)
    )  # October

    billing.billing_report("2026-09")
    base = {
        i.tenant.slug: [line for line in i.line_items if line["code"] == "base_fee"]
        for i in Invoice.objects.filter(period="2026-09").select_related("tenant")
    }
    # Created on the 10th: the 10th to the 30th, 21 of 30 days of Pro.
    (line,) = base["late"]
    assert (line["quantity"], line["per"], line["unit_price"]) == (21, 30, "49.99")
    assert line["amount_cents"] == half_up_cents(4999, 21, 30) == 3499
    assert "21 of 30 days (2026-09-10 to 2026-09-30)" in line["description"]
    # Free from the 1st to the 20th, Pro from the 21st (the day of the change) to the 30th.
    free, pro = base["mover"]
    assert (free["quantity"], free["amount_cents"]) == (20, half_up_cents(1001, 20, 30))
    assert (pro["quantity"], pro["amount_cents"]) == (10, half_up_cents(4999, 10, 30))
    assert free["amount_cents"] == 667 and pro["amount_cents"] == 1666
    invoice = Invoice.objects.get(tenant__slug="mover", period="2026-09")
    assert invoice.price_book.plan.slug == "pro"  # usage at the plan held on the last day
    assert invoice.total_cents == 667 + 1666
    # On Free all September (moved in October): the whole fee, one line, Free's prices.
    (full,) = base["steady"]
    assert (full["quantity"], full["per"], full["amount_cents"]) == (1, 1, 1001)
    assert Invoice.objects.get(tenant__slug="steady", period="2026-09").price_book.plan.slug == (
        "free"
    )
    # October: steady is prorated now (Free 4 days, Pro 27 of 31), the others whole.
    billing.billing_report("2026-10", tenant=steady)
    october = Invoice.objects.get(tenant__slug="steady", period="2026-10")
    fees = [
        (x["quantity"], x["amount_cents"]) for x in october.line_items if x["code"] == "base_fee"
    ]
    assert fees == [(4, half_up_cents(1001, 4, 31)), (27, half_up_cents(4999, 27, 31))]


def test_set_plan_command_records_the_change_billing_prorates(tmp_path):
    """`manage.py set_plan TENANT PLAN --from DATE` goes through `tenant_change_plan`: the tenant
    is on the new plan, and the period's base-fee terms split at that day (checked against the
    days counted by hand); what cannot be billed honestly is refused with a clear error."""
    import json
    from io import StringIO

    from django.core.management import CommandError, call_command

    prices("free", 1001)
    prices("pro", 4999)
    tenant = tenant_services.tenant_create("switcher", plan="free")
    Tenant.objects.filter(id=tenant.id).update(created_at=datetime(2026, 1, 5, tzinfo=UTC))
    out = StringIO()
    call_command("set_plan", "switcher", "pro", "--from", "2026-09-21", stdout=out)
    assert json.loads(out.getvalue()) == {
        "tenant": "switcher",
        "plan": "pro",
        "from_plan": "free",
        "changed": True,
        "effective_at": "2026-09-21T00:00:00+00:00",
    }
    tenant.refresh_from_db()
    assert tenant.plan.slug == "pro"
    plan, terms = billing.plan_terms(tenant, "2026-09")
    assert plan.slug == "pro"
    assert [(t["plan"], t["first_day"], t["last_day"]) for t in terms] == [
        ("free", "2026-09-01", "2026-09-20"),
        ("pro", "2026-09-21", "2026-09-30"),
    ]
    assert [t["base_fee_cents"] for t in terms] == [1001, 4999]
    # By hand: 20 days of Free, 10 of Pro, of 30.
    assert half_up_cents(1001, 20, 30) + half_up_cents(4999, 10, 30) == 667 + 1666
    assert billing.plan_terms(tenant, "2026-08")[1] == []  # August: Free, whole

    def refused(*args: str) -> str:
        with pytest.raises(CommandError) as caught:
            call_command("set_plan", *args, stdout=StringIO())
        return str(caught.value)

    assert "before it" in refused("switcher", "free", "--from", "2026-09-01")  # out of order
    assert "in the future" in refused("switcher", "free", "--from", "2999-01-01")
    assert "use YYYY-MM-DD" in refused("switcher", "free", "--from", "21/09/2026")
    assert "Unknown plan" in refused("switcher", "platinum")
    assert "Unknown tenant" in refused("nobody", "free")
    Invoice.objects.create(tenant=tenant, period="2026-10", status=Invoice.Status.ISSUED)
    assert "2026-10 is already invoiced" in refused("switcher", "free", "--from", "2026-10-15")
    tenant.refresh_from_db()
    assert tenant.plan.slug == "pro"  # every refusal left it as it was
    # Unchanged plan: nothing recorded.
    out = StringIO()
    call_command("set_plan", "switcher", "pro", stdout=out)
    assert json.loads(out.getvalue())["changed"] is False
    assert tenant.plan_changes.count() == 1
    # Without --from: from now.
    call_command("set_plan", "switcher", "free", stdout=StringIO())
    assert tenant.plan_changes.count() == 2

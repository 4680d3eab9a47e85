"""The Free plan's job executions get an included allowance, like its other units (issue 41).

Price books are versioned and an issued invoice keeps the book it was priced with, so no book is
changed in place: each free plan (no monthly fee) whose latest book bills job executions from
the first gets a new version, a copy of that book with `job_executions.included` set, in force
from the first month no invoice of the plan has been issued for yet.
"""

from datetime import date

from django.db import migrations

INCLUDED = 1_000  # tenants.billing.services.FREE_TIER["job_executions"]
# common.charges.pricing.LATER_DIMENSIONS["job_executions"], as of this migration.
LIST_PRICE = {"per": 1000, "tiers": [{"up_to": None, "price": "3.00"}]}


def _month_after(period: str) -> date:
    year, month = (int(part) for part in period.split("-"))
    return date(year + (month == 12), month % 12 + 1, 1)


def forwards(apps, schema_editor):
    Plan = apps.get_model("tenants", "Plan")
    PriceBook = apps.get_model("tenants", "PriceBook")
    Invoice = apps.get_model("tenants", "Invoice")
    today = date.today()
    for plan in Plan.objects.filter(monthly_price_cents=0):
        latest = PriceBook.objects.filter(plan=plan).order_by("-effective_from").first()
        if latest is None:  # its first book is made when needed, with the allowance
            continue
        spec = dict(latest.dimensions.get("job_executions") or LIST_PRICE)
        if spec.get("included", 0) >= INCLUDED:
            continue
        issued = (
            Invoice.objects.filter(tenant__plan=plan, status__in=["issued", "paid"])
            .order_by("-period")
            .values_list("period", flat=True)
            .first()
        )
        start = today.replace(day=1)
        if issued is not None:
            start = max(start, _month_after(issued))
        start = max(start, _month_after(latest.effective_from.strftime("%Y-%m")))
        if start <= latest.effective_from:
            continue
        PriceBook.objects.create(
            plan=plan,
            version=latest.version + 1,
            effective_from=start,
            currency=latest.currency,
            base_fee_cents=latest.base_fee_cents,
            dimensions={**latest.dimensions, "job_executions": {**spec, "included": INCLUDED}},
        )


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0030_template_groups"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]

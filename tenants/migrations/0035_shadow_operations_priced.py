"""Device shadow operations priced as AWS prices them (issue 44 point 4): $1.25 per million
operations in 1 KB units, the Free plan with AWS's free tier of 225,000 a month.

Shadow operations were metered (the usage log's `shadow_operations`) long before they were
priced, so they are priced only by a price book that names them
(`common.charges.pricing.BOOK_ONLY_DIMENSIONS`): a month priced with an older book bills none,
on its invoice or later as an adjustment. Price books are versioned and an issued invoice keeps
the book it was priced with, so no book that priced an issued invoice is changed: each plan
whose latest book does not name shadow operations gets a new version, a copy of that book with
them, in force from the first month no invoice of the plan has been issued for yet (the latest
book itself when it only starts then or later, as it priced no issued invoice).
"""

from datetime import date

from django.db import migrations

# common.charges.pricing.LATER_DIMENSIONS["shadow_operations"], as of this migration.
LIST_PRICE = {"per": 1_000_000, "tiers": [{"up_to": None, "price": "1.25"}]}
FREE_INCLUDED = 225_000  # tenants.billing.services.FREE_TIER["shadow_operations"]


def _month_after(period: str) -> date:
    year, month = (int(part) for part in period.split("-"))
    return date(year + (month == 12), month % 12 + 1, 1)


def forwards(apps, schema_editor):
    Plan = apps.get_model("tenants", "Plan")
    PriceBook = apps.get_model("tenants", "PriceBook")
    Invoice = apps.get_model("tenants", "Invoice")
    today = date.today()
    for plan in Plan.objects.all():
        latest = PriceBook.objects.filter(plan=plan).order_by("-effective_from").first()
        if latest is None:  # its first book is made when needed, with the price
            continue
        if "shadow_operations" in latest.dimensions:
            continue
        spec = {
            **LIST_PRICE,
            "included": FREE_INCLUDED if plan.monthly_price_cents == 0 else 0,
        }
        dimensions = {**latest.dimensions, "shadow_operations": spec}
        issued = (
            Invoice.objects.filter(tenant__plan=plan, status__in=["issued", "paid"])
            .order_by("-period")
            .values_list("period", flat=True)
            .first()
        )
        start = today.replace(day=1)
        if issued is not None:
            start = max(start, _month_after(issued))
        if start <= latest.effective_from:  # it priced no issued invoice
            latest.dimensions = dimensions
            latest.save(update_fields=["dimensions"])
            continue
        PriceBook.objects.create(
            plan=plan,
            version=latest.version + 1,
            effective_from=start,
            currency=latest.currency,
            base_fee_cents=latest.base_fee_cents,
            dimensions=dimensions,
        )


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0034_storage_quotas"),
    ]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]

"""Issues 14 and 15: the history of a tenant's plan changes (the base fee is prorated by it)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("tenants", "0009_trust")]

    operations = [
        migrations.CreateModel(
            name="TenantPlanChange",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("effective_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "from_plan",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="tenants.plan",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="plan_changes",
                        to="tenants.tenant",
                    ),
                ),
                (
                    "to_plan",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="tenants.plan",
                    ),
                ),
            ],
            options={"ordering": ["tenant", "effective_at", "id"]},
        ),
    ]

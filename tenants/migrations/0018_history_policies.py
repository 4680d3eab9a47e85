"""Issue 31, history policies: a tenant's topic filters kept for some days in the archive
(`HistoryPolicy`); the plans' default history (`history_default_days`: all topics, kept while a
tenant has no policy) and limits (`max_history_days`, `max_history_policies`, quota keys). The
paid plan, where it exists, keeps a week by default (free: nothing), as `tenants.services`
creates them."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


def paid_plan_keeps_a_week(apps, schema_editor):
    Plan = apps.get_model("tenants", "Plan")
    Plan.objects.filter(slug="pro").update(
        history_default_days=7, max_history_days=90, max_history_policies=100
    )


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0017_session_inspection"),
    ]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="history_default_days",
            field=models.PositiveIntegerField(
                db_default=0,
                default=0,
                help_text="days of all topics kept while a tenant has no policy",
            ),
        ),
        migrations.AddField(
            model_name="plan",
            name="max_history_days",
            field=models.PositiveIntegerField(
                db_default=1, default=1, help_text="days a history policy may keep"
            ),
        ),
        migrations.AddField(
            model_name="plan",
            name="max_history_policies",
            field=models.PositiveIntegerField(
                db_default=5, default=5, help_text="history policies per tenant"
            ),
        ),
        migrations.CreateModel(
            name="HistoryPolicy",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("topic_filter", models.CharField(max_length=256)),
                ("days", models.PositiveIntegerField()),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="history_policies",
                        to="tenants.tenant",
                    ),
                ),
            ],
            options={
                "ordering": ["topic_filter", "id"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("tenant", "topic_filter"), name="history_policy_unique_filter"
                    )
                ],
            },
        ),
        migrations.RunPython(paid_plan_keeps_a_week, migrations.RunPython.noop),
    ]

"""Issue 44 point 4, every stored byte capped: the plans' `max_shadows` (device shadows, classic
and named, per tenant), `max_shadow_versions` (past versions kept per shadow) and
`max_certificates` (live certificates per tenant). The paid plan, where it exists, gets the
larger limits `tenants.tenant.services.DEFAULT_PLANS` creates it with."""

from django.db import migrations, models


def paid_plan_limits(apps, schema_editor):
    Plan = apps.get_model("tenants", "Plan")
    Plan.objects.filter(slug="pro").update(
        max_shadows=100_000, max_shadow_versions=1_000, max_certificates=100_000
    )


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0033_rule_latency"),
    ]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="max_certificates",
            field=models.PositiveIntegerField(
                db_default=1000,
                default=1000,
                help_text="live certificates per tenant: CAs, devices', fleet claims and issued ones",
            ),
        ),
        migrations.AddField(
            model_name="plan",
            name="max_shadow_versions",
            field=models.PositiveIntegerField(
                db_default=100, default=100, help_text="past versions kept per device shadow"
            ),
        ),
        migrations.AddField(
            model_name="plan",
            name="max_shadows",
            field=models.PositiveIntegerField(
                db_default=1000,
                default=1000,
                help_text="device shadows (classic and named) per tenant",
            ),
        ),
        migrations.RunPython(paid_plan_limits, migrations.RunPython.noop),
    ]

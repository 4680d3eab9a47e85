"""Issue 44, point 2: `max_ca_certificates`, a quota key: the CA certificates a tenant may have
registered (live ones; the platform's fleet CA not counted). 5 on the free plan; the paid plan,
where it exists, 50, as `tenants.tenant.services` creates them."""

from django.db import migrations, models


def paid_plan_registers_more(apps, schema_editor):
    Plan = apps.get_model("tenants", "Plan")
    Plan.objects.filter(slug="pro").update(max_ca_certificates=50)


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0035_shadow_operations_priced"),
    ]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="max_ca_certificates",
            field=models.PositiveIntegerField(
                db_default=5,
                default=5,
                help_text="CA certificates a tenant may have registered (live ones, the fleet CA aside)",
            ),
        ),
        migrations.RunPython(paid_plan_registers_more, migrations.RunPython.noop),
    ]

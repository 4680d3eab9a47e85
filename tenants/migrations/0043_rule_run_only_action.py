from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0042_sink_resent"),
    ]

    operations = [
        migrations.AddField(
            model_name="rulerun",
            name="only_action",
            field=models.PositiveSmallIntegerField(
                blank=True, help_text="the rule's action that fires (from 1); null: all", null=True
            ),
        ),
    ]

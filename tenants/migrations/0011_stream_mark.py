"""Issue 17: the last committed forward-stream entry of each broker node (exactly once when a
node dies: data_plane/cluster/inherit.py)."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("tenants", "0010_billing_rules")]

    operations = [
        migrations.CreateModel(
            name="MqttStreamMark",
            fields=[
                ("node", models.CharField(max_length=200, primary_key=True, serialize=False)),
                (
                    "entry",
                    models.CharField(help_text="a Redis stream entry id, ms-seq", max_length=48),
                ),
                ("updated_at", models.DateTimeField(default=django.utils.timezone.now)),
            ],
        ),
    ]

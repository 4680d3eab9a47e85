"""Issue 47, point 4: the usage minutes' `sink_bytes`, the JSON bytes of rule outputs bucket (s3)
sinks took, as the rules job meters them into the usage log (rolled up for the charts, the API
and the forecast). 0 for every minute before."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0046_sink_claims_and_throughput"),
    ]

    operations = [
        migrations.AddField(
            model_name="usage",
            name="sink_bytes",
            field=models.BigIntegerField(db_default=0, default=0),
        ),
    ]

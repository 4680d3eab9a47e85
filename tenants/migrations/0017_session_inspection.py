"""Issue 30, inspection of what the broker holds: each live connection's row also says what its
session is (clean start, expiry) and holds (queue depth, in flight, sampled by the broker every
few seconds). Database defaults, so a broker that does not write them yet still inserts rows."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0016_journey"),
    ]

    operations = [
        migrations.AddField(
            model_name="deviceconnection",
            name="clean_start",
            field=models.BooleanField(db_default=True, default=True),
        ),
        migrations.AddField(
            model_name="deviceconnection",
            name="expiry_interval",
            field=models.BigIntegerField(
                db_default=0, default=0, help_text="seconds; 0xFFFFFFFF never"
            ),
        ),
        migrations.AddField(
            model_name="deviceconnection",
            name="queued",
            field=models.IntegerField(db_default=0, default=0, help_text="deliveries waiting"),
        ),
        migrations.AddField(
            model_name="deviceconnection",
            name="inflight",
            field=models.IntegerField(db_default=0, default=0, help_text="sent, not acknowledged"),
        ),
    ]

"""Issue 29, rules that cannot hurt each other: a dead letter keeps the exact body its action
sent (`body`, ASCII JSON), so a replay sends the same bytes even when the output held characters
Postgres' jsonb refuses (NUL, lone surrogates: `output` keeps them escaped for display); a rule
the live job paused for going over its budget again and again says when and why (`paused_at`,
`paused_reason`)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0012_sealed_webhook_secrets"),
    ]

    operations = [
        migrations.AddField(
            model_name="rule",
            name="paused_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="rule",
            name="paused_reason",
            field=models.TextField(blank=True, db_default="", default=""),
        ),
        migrations.AddField(
            model_name="ruledeadletter",
            name="body",
            field=models.TextField(blank=True, db_default="", default=""),
        ),
    ]

"""Issue 29, rules that cannot hurt each other: a dead letter keeps the exact body its action
sent (`body`, ASCII JSON), so a replay sends the same bytes even when the output held characters
Postgres' jsonb refuses (NUL, lone surrogates: `output` keeps them escaped for display); a rule
the live job paused for going over its budget again and again says when and why (`paused_at`,
`paused_reason`); the plans' `max_rule_outputs` (a quota key: outputs of one rule for one
message, each an action run); the live job's durable queue of action outputs waiting for another attempt or
for room in their tenant's lane (`RuleActionRetry`)."""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0014_email_verification"),
    ]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="max_rule_outputs",
            field=models.PositiveIntegerField(
                db_default=100,
                default=100,
                help_text="outputs of one rule for one message (FOREACH)",
            ),
        ),
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
        migrations.CreateModel(
            name="RuleActionRetry",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "action",
                    models.JSONField(help_text="the action as configured, without its secret"),
                ),
                ("body", models.TextField(help_text="the output as the exact JSON sent")),
                ("ts_ms", models.BigIntegerField(help_text="the message's time, for the lag")),
                ("attempts", models.IntegerField(default=0, help_text="attempts made so far")),
                ("last_error", models.TextField(blank=True, default="")),
                ("next_attempt_at", models.DateTimeField()),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now)),
                (
                    "rule",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenants.rule",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["next_attempt_at"], name="rule_retry_due_idx")],
            },
        ),
    ]

"""Issue 47: sinks as rule actions with a durable outbox. The outbox (`tenants_sinkoutbox`) and
each sink's state (`tenants_sinkstate`), written by the rules job with plain SQL (every column it
leaves out has a database default); the quota keys `max_sink_outbox_messages` and
`max_sink_outbox_bytes` (per sink: 10,000 outputs and 10 MiB on the free plan; the paid plan,
where it exists, 1,000,000 and 1 GiB, as `tenants.tenant.services` creates them)."""

import django.db.models.deletion
import django.db.models.functions.datetime
import django.utils.timezone
from django.db import migrations, models


def paid_plan_keeps_more(apps, schema_editor):
    Plan = apps.get_model("tenants", "Plan")
    Plan.objects.filter(slug="pro").update(
        max_sink_outbox_messages=1_000_000, max_sink_outbox_bytes=1_073_741_824
    )


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0040_alarm_notifications"),
    ]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="max_sink_outbox_bytes",
            field=models.PositiveBigIntegerField(
                db_default=10485760, default=10485760, help_text="bytes one sink's outbox keeps"
            ),
        ),
        migrations.AddField(
            model_name="plan",
            name="max_sink_outbox_messages",
            field=models.PositiveIntegerField(
                db_default=10000, default=10000, help_text="outputs one sink's outbox keeps"
            ),
        ),
        migrations.CreateModel(
            name="SinkOutbox",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                (
                    "action_index",
                    models.PositiveSmallIntegerField(help_text="0-based place in rule.actions"),
                ),
                (
                    "key",
                    models.TextField(
                        blank=True,
                        db_default="",
                        default="",
                        help_text="ordering key: delivered in id order",
                    ),
                ),
                (
                    "body",
                    models.TextField(help_text="the output as the exact JSON the sink is given"),
                ),
                (
                    "ts_ms",
                    models.BigIntegerField(help_text="the message's time (ms since the epoch)"),
                ),
                ("ledger_key", models.TextField(blank=True, db_default="", default="")),
                ("topic", models.TextField(blank=True, db_default="", default="")),
                ("client_id", models.TextField(blank=True, db_default="", default="")),
                ("attempts", models.IntegerField(db_default=0, default=0)),
                (
                    "next_attempt_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(),
                        default=django.utils.timezone.now,
                    ),
                ),
                ("last_error", models.TextField(blank=True, db_default="", default="")),
                (
                    "created_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(),
                        default=django.utils.timezone.now,
                    ),
                ),
                (
                    "rule",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenants.rule",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenants.tenant",
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        fields=["rule", "action_index", "id"], name="sink_outbox_order_idx"
                    ),
                    models.Index(fields=["next_attempt_at"], name="sink_outbox_due_idx"),
                ],
            },
        ),
        migrations.CreateModel(
            name="SinkState",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "action_index",
                    models.PositiveSmallIntegerField(help_text="0-based place in rule.actions"),
                ),
                (
                    "state",
                    models.CharField(
                        choices=[("ok", "Ok"), ("retrying", "Retrying"), ("failing", "Failing")],
                        db_default="ok",
                        default="ok",
                        max_length=8,
                    ),
                ),
                ("last_error", models.TextField(blank=True, db_default="", default="")),
                ("last_error_at", models.DateTimeField(blank=True, null=True)),
                ("last_ok_at", models.DateTimeField(blank=True, null=True)),
                (
                    "delivered",
                    models.BigIntegerField(
                        db_default=0, default=0, help_text="outputs the sink took"
                    ),
                ),
                (
                    "dead",
                    models.BigIntegerField(
                        db_default=0, default=0, help_text="outputs dead-lettered"
                    ),
                ),
                (
                    "updated_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now(),
                        default=django.utils.timezone.now,
                    ),
                ),
                (
                    "rule",
                    models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenants.rule",
                    ),
                ),
                (
                    "tenant",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="tenants.tenant",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        fields=("rule", "action_index"), name="sink_state_unique_action"
                    )
                ],
            },
        ),
        migrations.RunPython(paid_plan_keeps_more, migrations.RunPython.noop),
    ]

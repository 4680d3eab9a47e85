"""Rules' webhook secrets sealed at rest (`tenants.models.ActionsField`, `common.security.sealed`): the
field now seals on save, and this seals what was stored in the clear before it. Reversed, the
secrets are written back in the clear (what the code before it reads)."""

import json

from django.db import migrations

import tenants.models


def seal_stored(apps, schema_editor):
    Rule = apps.get_model("tenants", "Rule")
    for rule in Rule.objects.using(schema_editor.connection.alias).only("id", "actions"):
        rule.save(update_fields=["actions"])  # read open, written sealed (ActionsField)


def open_stored(apps, schema_editor):
    Rule = apps.get_model("tenants", "Rule")
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        for rule in Rule.objects.using(connection.alias).only("id", "actions"):
            cursor.execute(
                "UPDATE tenants_rule SET actions = %s::jsonb WHERE id = %s",
                [json.dumps(rule.actions), rule.id],
            )


class Migration(migrations.Migration):
    dependencies = [
        ("tenants", "0011_stream_mark"),
    ]

    operations = [
        migrations.AlterField(
            model_name="rule",
            name="actions",
            field=tenants.models.ActionsField(blank=True, default=list),
        ),
        migrations.RunPython(seal_stored, open_stored),
    ]

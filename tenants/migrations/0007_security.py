"""Issue 20: the `max_persistent_sessions` quota key, SCRAM-SHA-256 verifiers on credentials
(for MQTT 5.0 enhanced authentication against Postgres), and client-id patterns as globs.

Patterns were regular expressions run on the broker's event loop; they are globs now
(`common.access.client_id_pattern`). Each stored pattern with an exact glob equivalent (literals, `.`,
`.*`, `.+`, anchors) is rewritten to it; any other one cannot be kept safely, so its device falls
back to the `exact` policy (client id = device name) and the old pattern is kept in the device's
attributes under `legacy_client_id_regex` for its owner to translate.
"""

from django.db import migrations, models


def patterns_to_globs(apps, schema_editor):
    from common.access.client_id_pattern import from_legacy_regex

    Device = apps.get_model("tenants", "Device")
    for device in Device.objects.filter(client_id_policy="pattern").iterator():
        glob = from_legacy_regex(device.client_id_pattern)
        if glob is not None:
            device.client_id_pattern = glob
        else:
            device.attributes = {
                **(device.attributes or {}),
                "legacy_client_id_regex": device.client_id_pattern,
            }
            device.client_id_policy = "exact"
            device.client_id_pattern = ""
        device.save(update_fields=["client_id_pattern", "client_id_policy", "attributes"])


class Migration(migrations.Migration):
    dependencies = [("tenants", "0006_billing")]

    operations = [
        migrations.AddField(
            model_name="plan",
            name="max_persistent_sessions",
            field=models.PositiveIntegerField(
                default=1000, help_text="sessions kept for offline clients, per tenant"
            ),
        ),
        migrations.AddField(
            model_name="credential",
            name="scram_verifier",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.RunPython(patterns_to_globs, migrations.RunPython.noop),
    ]

"""Accounts prove their email address before they are given anything they did not create
(tenants.accounts, issue 28): `AccountTrust` holds the address proved and digests of the
addresses the account last logged in from (the login throttle). Accounts that exist before it have
no row: unverified, so the portal asks them to confirm, and operator commands wait until they do."""

import django.contrib.postgres.fields
import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("tenants", "0013_throttling"),
    ]

    operations = [
        migrations.CreateModel(
            name="AccountTrust",
            fields=[
                (
                    "user",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        primary_key=True,
                        related_name="trust",
                        serialize=False,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                ("verified_email", models.EmailField(blank=True, default="", max_length=254)),
                ("verified_at", models.DateTimeField(blank=True, null=True)),
                (
                    "login_addresses",
                    django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=64),
                        blank=True,
                        default=list,
                        size=None,
                    ),
                ),
            ],
        ),
    ]

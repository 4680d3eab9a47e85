"""Device shadows as AWS IoT keeps them, and their past versions (`tenants.shadows`,
`data_plane.shadows`)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from tenants.models.devices import Device
from tenants.models.tenant import Tenant


class Shadow(models.Model):
    """A device's shadow, as AWS IoT keeps it (`common.shadow.document`): `name` "" is the
    classic shadow, any other a named one. Written by the broker's shadow service
    (`data_plane.shadows.store`, with psycopg) and by the REST API (`tenants.shadows.services`),
    each holding the row's lock while it merges. A deleted shadow keeps its row (`present`
    false) and its `version`, so one created again under that name goes on from it."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="shadows")
    name = models.CharField(max_length=64, blank=True, default="")
    version = models.BigIntegerField(default=0)
    present = models.BooleanField(default=False)
    state = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["device", "name"], name="shadow_unique_name")
        ]
        ordering = ["name"]


class ShadowVersion(models.Model):
    """One accepted change of a shadow, kept for the plan's `shadow_history_days`: the state
    after it (empty for a delete), the request's state, and who made it. A change made through
    the REST API carries the replies devices are sent (`replies`) until a broker has published
    them (`published_at`): the control plane reaches the broker through the database
    (`data_plane.shadows.announcements`)."""

    class Operation(models.TextChoices):
        UPDATE = "update"
        DELETE = "delete"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    shadow = models.ForeignKey(Shadow, on_delete=models.CASCADE, related_name="versions")
    version = models.BigIntegerField()
    operation = models.CharField(max_length=8, choices=Operation.choices)
    state = models.JSONField(default=dict, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    request = models.JSONField(null=True, blank=True, help_text="the update's state node")
    client_token = models.CharField(max_length=64, blank=True, default="")
    actor = models.CharField(max_length=255, blank=True, default="", help_text="client id or user")
    via = models.CharField(max_length=8, default="mqtt", help_text="mqtt | api")
    replies = models.JSONField(null=True, blank=True, help_text="[[topic, body], ...] to publish")
    published_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["shadow", "-id"], name="shadow_version_recent"),
            models.Index(fields=["tenant", "created_at"], name="shadow_version_age"),
        ]

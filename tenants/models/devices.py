"""A tenant's devices: the device, its live connections as the brokers report them, and its
secrets (`Credential`); reads and writes are `tenants.devices`."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from tenants.audited import AuditedQuerySet
from tenants.models.names import DEVICE_NAME_VALIDATOR
from tenants.models.tenant import Tenant


class Device(models.Model):
    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    class ClientIdPolicy(models.TextChoices):
        EXACT = "exact"
        ANY = "any"
        PATTERN = "pattern"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="devices")
    name = models.CharField(max_length=64, validators=[DEVICE_NAME_VALIDATOR])
    enabled = models.BooleanField(default=True)
    client_id_policy = models.CharField(
        max_length=8, choices=ClientIdPolicy.choices, default=ClientIdPolicy.EXACT
    )
    client_id_pattern = models.CharField(max_length=255, blank=True)
    attributes = models.JSONField(default=dict, blank=True)
    last_seen_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # Written by the broker (data_plane.tenancy.presence) when the device's last connection ended.
    last_disconnect_reason = models.CharField(max_length=64, blank=True, default="")
    last_disconnected_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="device_unique_name")
        ]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.username

    @property
    def username(self) -> str:
        return f"{self.tenant.slug}/{self.name}"


class DeviceConnection(models.Model):
    """A live MQTT connection of a device, as the broker that holds it reports it
    (`data_plane.tenancy.presence`). A row whose `heartbeat_at` is older than 90 s belongs to a
    broker that is gone and is ignored."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="connections")
    client_id = models.CharField(max_length=255)
    connection_key = models.CharField(max_length=32, unique=True)
    broker = models.CharField(max_length=128)
    address = models.CharField(max_length=64)
    protocol_version = models.PositiveSmallIntegerField()
    transport = models.CharField(max_length=16, default="tcp")
    connected_at = models.DateTimeField()
    subscriptions = models.JSONField(default=list)
    heartbeat_at = models.DateTimeField()
    # The session behind the connection, for the inspection (GET /api/v1/sessions): what the
    # client asked for at CONNECT, and a sample of what its session holds, written every few
    # seconds where it changed (data_plane.tenancy.session_figures).
    clean_start = models.BooleanField(default=True, db_default=True)
    expiry_interval = models.BigIntegerField(
        default=0, db_default=0, help_text="seconds; 0xFFFFFFFF never"
    )
    queued = models.IntegerField(default=0, db_default=0, help_text="deliveries waiting")
    inflight = models.IntegerField(default=0, db_default=0, help_text="sent, not acknowledged")

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "client_id"], name="deviceconnection_unique_client"
            )
        ]
        ordering = ["connected_at"]

    @property
    def protocol(self) -> str:
        return {3: "MQTT 3.1", 4: "MQTT 3.1.1", 5: "MQTT 5.0"}.get(
            self.protocol_version, str(self.protocol_version)
        )


class Credential(models.Model):
    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="credentials")
    secret_hash = models.CharField(max_length=128)
    # SCRAM-SHA-256 verifier of the same secret (common.security.secrets.scram_verifier): MQTT 5.0
    # enhanced authentication; empty for credentials issued before it existed.
    scram_verifier = models.CharField(max_length=200, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # When a rotation replaced this secret: from then it only lives out its grace period.
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["device"], name="credential_active_idx", condition=Q(revoked_at=None)
            )
        ]

    @property
    def is_active(self) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()

    @property
    def state(self) -> str:
        """`active`, `retiring` (replaced, still accepted until `expires_at`), `expired` or
        `revoked`."""
        if self.expires_at is not None and self.expires_at <= (self.revoked_at or timezone.now()):
            return "expired"  # also once the expiry sweep (credentials_expire) has revoked it
        if self.revoked_at is not None:
            return "revoked"
        return "retiring" if self.retired_at is not None else "active"

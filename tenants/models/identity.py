"""Device identity beyond secrets (issue 20): X.509 (a tenant's CAs, devices' own certificates)
and JWT public keys; reads and writes are `tenants.devices.identity`."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from tenants.audited import AuditedQuerySet
from tenants.models.devices import Device
from tenants.models.names import DEVICE_NAME_VALIDATOR
from tenants.models.tenant import Tenant


class CaCertificate(models.Model):
    """A tenant's certificate authority (AWS IoT's "register CA"): device certificates it signed
    name their device in the subject CN, and the CA names the tenant. A CA belongs to one tenant
    (its fingerprint is unique among the live ones)."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="ca_certificates")
    name = models.CharField(max_length=64, validators=[DEVICE_NAME_VALIDATOR])
    pem = models.TextField()
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the DER, hex")
    subject = models.CharField(max_length=512)
    not_after = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Just-in-time registration (AWS's auto-registration of a CA): a certificate it signed whose
    # CN names no device yet makes that device on its first connection.
    auto_registration = models.BooleanField(default=False, db_default=False)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="ca_unique_name"),
            models.UniqueConstraint(
                fields=["fingerprint"], condition=Q(revoked_at=None), name="ca_live_fingerprint"
            ),
        ]


class DeviceCertificate(models.Model):
    """One device's own certificate, registered by its SHA-256 fingerprint (self-signed or from a
    CA the platform does not know). It proves the key, not the tenant: a client presenting it must
    name its device in the user name (`tenant/device`), so another tenant registering the same
    certificate for itself gains nothing (unique per tenant, not across tenants)."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="device_certificates")
    device = models.ForeignKey(Device, on_delete=models.CASCADE, related_name="certificates")
    pem = models.TextField()
    fingerprint = models.CharField(max_length=64, help_text="SHA-256 of the DER, hex")
    subject = models.CharField(max_length=512)
    not_after = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "fingerprint"],
                condition=Q(revoked_at=None),
                name="device_cert_live_fingerprint",
            ),
        ]


class JwtKey(models.Model):
    """A tenant's public key for device JWTs (the password of `tenant/device`)."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    class Algorithm(models.TextChoices):
        RS256 = "RS256"
        ES256 = "ES256"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="jwt_keys")
    kid = models.CharField(max_length=64, validators=[DEVICE_NAME_VALIDATOR])
    algorithm = models.CharField(max_length=5, choices=Algorithm.choices)
    public_key = models.TextField(help_text="PEM (SubjectPublicKeyInfo)")
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["kid"]
        constraints = [models.UniqueConstraint(fields=["tenant", "kid"], name="jwt_key_kid")]

"""Fleet provisioning by claim (issue 32): the CA the platform keeps for a tenant, its provisioning
templates, and the certificates that CA issued (claims, and devices' own); reads and writes
are `tenants.fleet`."""

from __future__ import annotations

from django.db import models
from django.db.models import Q
from django.utils import timezone

from tenants.audited import AuditedQuerySet
from tenants.models.devices import Device
from tenants.models.identity import CaCertificate
from tenants.models.jobs import DeviceGroup
from tenants.models.names import DEVICE_NAME_VALIDATOR
from tenants.models.tenant import Tenant


class FleetAuthority(models.Model):
    """The CA the platform keeps for one tenant's fleet provisioning. Its certificate is one of
    the tenant's registered CAs (so the TLS listeners let its certificates through); its key is
    sealed at rest (`common.security.sealed`) and used by the broker to sign devices' certificates."""

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="fleet_authority")
    ca = models.OneToOneField(CaCertificate, on_delete=models.CASCADE, related_name="+")
    key = models.TextField(help_text="PEM private key, sealed")
    created_at = models.DateTimeField(default=timezone.now)


class ProvisioningTemplate(models.Model):
    """AWS IoT's provisioning template: what a device that provisions with it becomes. The device
    name comes from the request's parameters (`sensor-{SerialNumber}`); the ACL rules are given to
    the new device (`${client}` is its name), and it joins the template's groups (AWS's thing
    groups of the template's `AWS::IoT::Thing` resource), all in RegisterThing's transaction."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    tenant = models.ForeignKey(
        Tenant, on_delete=models.CASCADE, related_name="provisioning_templates"
    )
    name = models.CharField(max_length=64, validators=[DEVICE_NAME_VALIDATOR])
    device_name_template = models.CharField(max_length=128)
    acl_rules = models.JSONField(default=list, blank=True)  # [{action, permission, topic}]
    attributes = models.JSONField(default=dict, blank=True)  # given to the new device
    # The new device's groups: the tenant's own (checked by `tenants.fleet.services`); a group deleted
    # later simply drops out, as its devices stay when a group goes.
    groups = models.ManyToManyField(DeviceGroup, blank=True, related_name="provisioning_templates")
    enabled = models.BooleanField(default=True)
    pre_provisioning_hook_url = models.URLField(max_length=512, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="provisioning_template_name")
        ]


class FleetCertificate(models.Model):
    """A certificate the tenant's fleet CA issued, known by its SHA-256 (AWS's certificateId):
    a claim of a template (it may only provision), or a device's own, created over MQTT and
    bound to its device when the device registered (`device` set)."""

    class Kind(models.TextChoices):
        CLAIM = "claim"
        DEVICE = "device"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=6, choices=Kind.choices)
    certificate_id = models.CharField(max_length=64, unique=True, help_text="SHA-256 of the DER")
    # A claim's template, or the template of the claim that created a device's certificate.
    # SET_NULL: deleting a template (which deletes its claims) leaves its devices connected.
    template = models.ForeignKey(
        ProvisioningTemplate,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="certificates",
    )
    device = models.ForeignKey(
        Device, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    pem = models.TextField()
    # A device certificate's one-time ownership token (RegisterThing), as a SHA-256 hex digest.
    ownership_token = models.CharField(max_length=64, blank=True, default="")
    token_expires_at = models.DateTimeField(null=True, blank=True)
    not_after = models.DateTimeField()
    created_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["template"], name="fleet_claim_live_idx", condition=Q(revoked_at=None)
            )
        ]

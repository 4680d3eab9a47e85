"""A tenant's ACL rules: who may publish or subscribe to what (`tenants.acls`)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from tenants.audited import AuditedQuerySet
from tenants.models.devices import Device
from tenants.models.tenant import Tenant


class AclRule(models.Model):
    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    class Action(models.TextChoices):
        PUBLISH = "publish"
        SUBSCRIBE = "subscribe"
        BOTH = "both"

    class Permission(models.TextChoices):
        ALLOW = "allow"
        DENY = "deny"

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="acl_rules")
    device = models.ForeignKey(
        Device, on_delete=models.CASCADE, null=True, blank=True, related_name="acl_rules"
    )
    action = models.CharField(max_length=9, choices=Action.choices)
    permission = models.CharField(max_length=5, choices=Permission.choices)
    topic = models.CharField(max_length=512, help_text="filter; ${tenant} and ${client} expand")
    position = models.PositiveIntegerField(default=0, help_text="rules apply in ascending order")
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["position", "id"]

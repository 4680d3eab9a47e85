"""Accountability (issue 20): the audit log's entries (`tenants.audit` writes and reads them)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone


class AuditEntry(models.Model):
    """One control-plane change: who, what, when, from where, through which door. The tenant is
    kept by id and slug, not as a foreign key: the entry outlives what it records, the tenant's
    own deletion included."""

    tenant_id = models.BigIntegerField(null=True, blank=True, help_text="None: platform-wide")
    tenant_slug = models.CharField(max_length=32, blank=True)
    actor = models.CharField(max_length=254, help_text="the user's email, or the command")
    via = models.CharField(max_length=16, help_text="api, portal, admin, command, system")
    action = models.CharField(max_length=64, help_text="e.g. device.created")
    target = models.CharField(max_length=256, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    address = models.GenericIPAddressField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["tenant_id", "-created_at"], name="audit_tenant_time")]

"""A tenant's history policies: which topics the archive keeps, and for how long
(`tenants.history`)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from tenants.audited import AuditedQuerySet
from tenants.models.tenant import Tenant


class HistoryPolicy(models.Model):
    """A tenant's choice to keep the messages on `topic_filter` (MQTT wildcards) for `days` in
    the archive. The broker archives a topic only if a policy or an enabled rule needs it
    (`common.archive.history_policy`); retention deletes the tenant's history hours older than its
    longest policy (`tenants.history.retention`)."""

    objects = AuditedQuerySet.as_manager()  # bulk writes are audited too

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="history_policies")
    topic_filter = models.CharField(max_length=256)
    days = models.PositiveIntegerField()
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "topic_filter"], name="history_policy_unique_filter"
            )
        ]
        ordering = ["topic_filter", "id"]

    def __str__(self) -> str:
        return f"{self.topic_filter} ({self.days} d)"

"""Durable shared subscription groups (issue 45): what the broker keeps of a group while it has no
member; reads and writes are `tenants.shared_groups`."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from tenants.models.tenant import Tenant


class SharedGroupQueue(models.Model):
    """A durable shared subscription group (`$share/{name}/{topic_filter}`): its messages wait in
    `MqttQueuedMessage` under `holder_id` while it has no member (data_plane.broker.groups)."""

    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="shared_groups")
    name = models.CharField(max_length=256)
    topic_filter = models.TextField()
    # The client id its queue rows are kept under: `$group:` and a hash of (name, filter), so
    # that any group fits the column and no client can take it (CONNECT refuses the prefix).
    holder_id = models.CharField(max_length=256)
    members = models.IntegerField(default=0, help_text="members as its broker last counted them")
    created_at = models.DateTimeField(default=timezone.now)
    # Null while it has members; else when the group and its messages go (group_retention).
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "holder_id"], name="shared_group_unique")
        ]

"""The audited models' queryset (their manager): bulk writes (`QuerySet.update()`,
`bulk_create`, `bulk_update`) send no Django signal, so this queryset sends one of its own,
`bulk_written`, with the rows it touched; the audit log (`tenants.audit`) records them as a
`save()` would have been recorded.

It sits below the models and knows nothing of them or of the log: `tenants.models` builds its
managers from it, and `tenants.audit` (which reads the models) listens to its signal. That keeps
the import graph one-way (models -> audited <- audit -> models), where the log and the models
used to import each other.
"""

from __future__ import annotations

from django.db import models, transaction
from django.db.models.expressions import Combinable
from django.dispatch import Signal

# Fields whose change alone is bookkeeping, not a change anyone made.
BOOKKEEPING = {"last_used_at", "last_seen_at", "updated_at", "unreleased", "released_at"}
# Values safe to show (never secrets).
SAFE_VALUES = {
    "enabled",
    "status",
    "role",
    "action",
    "permission",
    "topic",
    "client_id_policy",
    "revoked_at",
    "expires_at",
    "acl_default",
    "archive_enabled",
    "quota_overrides",
    "subject",
    "algorithm",
    "not_after",
    "topic_filter",
    "days",
    "monthly_cents",
    "thresholds",
    "at_limit",
    "budget_degraded",
}

# Sent after a bulk write with `rows` (the model instances as written), `verb` ("created",
# "updated") and `fields` (the names written, or None for a create).
bulk_written = Signal()


def plain(value):
    """A value as JSON keeps it (dates as ISO text)."""
    if value is None or isinstance(value, str | int | bool | dict | list):
        return value
    return value.isoformat() if hasattr(value, "isoformat") else str(value)


def safe_fields(model) -> list[str]:
    names = {f.attname for f in model._meta.concrete_fields}
    return sorted(SAFE_VALUES & names)


class AuditedQuerySet(models.QuerySet):
    """The audited models' queryset: its bulk writes are recorded like saves (no signal tells
    about them). Bookkeeping-only updates (`last_used_at`...) are not, like with signals."""

    def update(self, **kwargs):
        if not kwargs or set(kwargs) <= BOOKKEEPING:
            return super().update(**kwargs)
        base = self.model._base_manager.using(self.db)  # a plain manager: no recursion
        with transaction.atomic(using=self.db):
            # The rows it will touch (whatever shape this queryset has: values(), distinct()),
            # locked so the update changes exactly these.
            rows = list(base.filter(pk__in=self.values("pk")).select_for_update())
            if not rows:
                return 0
            count = base.filter(pk__in=[row.pk for row in rows]).update(**kwargs)
            safe = set(safe_fields(self.model))
            for row in rows:
                row._audit_before = {f: plain(getattr(row, f)) for f in kwargs if f in safe}
                for field, value in kwargs.items():
                    if not isinstance(value, Combinable):  # F() etc.: not known without a read
                        setattr(row, field, value)
                    else:
                        row._audit_before.pop(field, None)
            bulk_written.send(sender=self.model, rows=rows, verb="updated", fields=sorted(kwargs))
        return count

    def bulk_create(self, objs, *args, **kwargs):
        made = super().bulk_create(objs, *args, **kwargs)
        bulk_written.send(sender=self.model, rows=made, verb="created", fields=None)
        return made

    def bulk_update(self, objs, fields, *args, **kwargs):
        objs = list(objs)
        count = super().bulk_update(objs, fields, *args, **kwargs)
        if not set(fields) <= BOOKKEEPING:
            bulk_written.send(sender=self.model, rows=objs, verb="updated", fields=sorted(fields))
        return count

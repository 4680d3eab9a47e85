"""The audit log: every control-plane change, who made it, when, from which address, through
which door (API, portal, admin, a management command).

One writer, `record()`. Saves and deletes of the tenant domain's models reach it through Django
signals (`connect_signals`, from `TenantsConfig.ready`), so every path that writes — the services
the API and portal call, the Django admin, management commands, Celery tasks — is covered without
each remembering to call it. Who is acting comes from a context variable: the request
(`AuditActorMiddleware`; DRF sets `request.user` when it authenticates a token, which is read
only when an entry is written), else the command line.

Bulk writes (`QuerySet.update()`, `bulk_create`, `bulk_update`) send no signals: the audited
models' managers are `AuditedQuerySet`s (`tenants.audited`), whose `bulk_written` signal
records one entry per row they touch, the same
entry a `save()` would have made (`detail.bulk` says which way it came). So a rotation's revoked
secrets, or any later bulk write, cannot slip past the log.

Secrets never enter an entry: `detail` holds field names and a few safe values, never hashes,
PEMs or keys.
"""

from __future__ import annotations

import csv
import getpass
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.db.models import QuerySet
from django.db.models.signals import post_delete, post_save, pre_save
from django.http import HttpRequest, HttpResponse

from tenants import models
from tenants.audited import BOOKKEEPING, SAFE_VALUES, bulk_written, plain, safe_fields
from tenants.models import AuditEntry, Device, Tenant

_request: ContextVar[HttpRequest | None] = ContextVar("audit_request", default=None)
# Who acts when the request does not say: the person signing up or accepting an invitation is
# not logged in yet while their account, tenant and membership are written (`acting_as`).
_acting_as: ContextVar[str | None] = ContextVar("audit_acting_as", default=None)

# What is recorded, and the field that gives each object a readable name.
_NAMED = {
    "Tenant": "slug",
    "Device": "name",
    "Credential": "id",
    "AclRule": "topic",
    "Rule": "name",
    "ApiToken": "prefix",
    "Membership": "role",
    "CaCertificate": "name",
    "DeviceCertificate": "fingerprint",
    "JwtKey": "kid",
    "Credit": "period",
    "Invitation": "email",
    "HistoryPolicy": "topic_filter",
    "Budget": "label",
    "BillingDetails": "label",
    "Job": "job_id",
    "DeviceGroup": "name",
}


class AuditActorMiddleware:
    """Makes the request the audit log's source of who/where for everything it writes."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        token = _request.set(request)
        try:
            return self.get_response(request)
        finally:
            _request.reset(token)


@contextmanager
def acting_as(actor: str) -> Iterator[None]:
    """Entries written inside name `actor` (an email), whoever the request says is logged in."""
    token = _acting_as.set(actor)
    try:
        yield
    finally:
        _acting_as.reset(token)


def _actor() -> tuple[str, str, str | None]:
    """(actor, via, address) of whatever is writing now."""
    request = _request.get()
    named = _acting_as.get()
    if request is not None:
        from tenants.client_address import client_address

        user = getattr(request, "user", None)
        actor = getattr(user, "email", "") or getattr(user, "username", "") or "anonymous"
        actor = named or actor
        path = request.path
        via = "api" if path.startswith("/api/") else "admin" if path.startswith("/admin/") else ""
        try:
            address = client_address(request.META) or None
        except Exception:  # an unparsable header must not stop the write being recorded
            address = None
        return actor, via or "portal", address
    argv = sys.argv
    if argv and argv[0].endswith("manage.py") and len(argv) > 1:
        try:
            who = getpass.getuser()
        except Exception:
            who = "?"
        return named or f"{who}: manage.py {argv[1]}"[:254], "command", None
    return named or "system", "system", None


def record(
    *,
    tenant_id: int | None,
    tenant_slug: str,
    action: str,
    target: str = "",
    detail: dict | None = None,
):
    """The one writer of the audit log."""
    actor, via, address = _actor()
    return AuditEntry.objects.create(
        tenant_id=tenant_id,
        tenant_slug=tenant_slug[:32],
        actor=actor,
        via=via,
        action=action[:64],
        target=str(target)[:256],
        detail=detail or {},
        address=address,
    )


def _tenant_of(instance) -> tuple[int | None, str]:
    if isinstance(instance, Tenant):
        return instance.id, instance.slug
    tenant_id = getattr(instance, "tenant_id", None)
    if tenant_id is None and getattr(instance, "device_id", None) is not None:
        tenant_id = instance.device.tenant_id
    if tenant_id is None:
        return None, ""
    slug = Tenant.objects.filter(id=tenant_id).values_list("slug", flat=True).first() or ""
    return tenant_id, slug


def _target(instance) -> str:
    if type(instance).__name__ == "Membership":  # the member, not the role
        return instance.user.email or instance.user.get_username()
    name = str(getattr(instance, _NAMED[type(instance).__name__], "") or instance.pk)
    device = getattr(instance, "device", None) if hasattr(instance, "device_id") else None
    return f"{device.name}/{name}" if device is not None else name


def _target_or_id(instance) -> str:
    """`_target`, or the id when the row's related objects are gone (a cascade deleted its
    device first, a bulk row without them)."""
    try:
        return _target(instance)
    except Exception:
        return str(instance.pk)


def _detail(instance, fields: Iterable[str] | None, before: dict | None = None) -> dict:
    detail: dict = {}
    if fields:
        detail["fields"] = sorted(fields)
    for field in fields or SAFE_VALUES:
        if field in SAFE_VALUES and hasattr(instance, field):
            value = getattr(instance, field)
            detail[field] = value if isinstance(value, str | int | bool | dict) else str(value)
    # What each safe field was and became, for the entry's words (`tenants.audit_words`).
    changes = {
        field: [old, plain(getattr(instance, field))]
        for field, old in (before or {}).items()
        if (not fields or field in fields) and old != plain(getattr(instance, field))
    }
    if changes:
        detail["changes"] = changes
    return detail


def _before(sender, instance, raw=False, update_fields=None, **kwargs) -> None:
    """The safe fields' stored values, read before an update overwrites them."""
    instance._audit_before = None
    if raw or instance._state.adding or instance.pk is None:
        return
    if update_fields is not None and set(update_fields) <= BOOKKEEPING:
        return
    fields = safe_fields(sender)
    if update_fields is not None:
        fields = [f for f in fields if f in update_fields]
    if not fields:
        return
    row = sender._base_manager.filter(pk=instance.pk).values(*fields).first()
    instance._audit_before = {k: plain(v) for k, v in row.items()} if row else None


def _saved(sender, instance, created, update_fields=None, raw=False, **kwargs) -> None:
    if raw:  # fixtures being loaded
        return
    if update_fields and set(update_fields) <= BOOKKEEPING:
        return
    tenant_id, slug = _tenant_of(instance)
    action = f"{sender._meta.model_name}.{'created' if created else 'updated'}"
    before = None if created else getattr(instance, "_audit_before", None)
    record(
        tenant_id=tenant_id,
        tenant_slug=slug,
        action=action,
        target=_target(instance),
        detail=_detail(instance, None if created else update_fields, before),
    )


def _deleted(sender, instance, **kwargs) -> None:
    if isinstance(instance, Tenant):
        tenant_id, slug = instance.id, instance.slug
    else:
        tenant_id = getattr(instance, "tenant_id", None)
        slug = ""
        if tenant_id is None:
            device_id = getattr(instance, "device_id", None)
            row = Device.objects.filter(id=device_id).values_list("tenant_id", flat=True)
            tenant_id = row.first() if device_id else None
    if tenant_id is not None and not slug:
        slug = Tenant.objects.filter(id=tenant_id).values_list("slug", flat=True).first() or ""
    target = _target_or_id(instance)
    record(
        tenant_id=tenant_id,
        tenant_slug=slug,
        action=f"{sender._meta.model_name}.deleted",
        target=target,
    )


def _bulk_written(sender, rows: list, verb: str, fields: list[str] | None, **kwargs) -> None:
    """A bulk write's rows (`tenants.audited.bulk_written`), one entry each."""
    name = sender._meta.model_name
    for row in rows:
        tenant_id, slug = _tenant_of(row)
        target = _target_or_id(row)
        record(
            tenant_id=tenant_id,
            tenant_slug=slug,
            action=f"{name}.{verb}",
            target=target,
            detail={**_detail(row, fields, getattr(row, "_audit_before", None)), "bulk": True},
        )


def connect_signals() -> None:
    for name in _NAMED:
        model = getattr(models, name)
        pre_save.connect(_before, sender=model, dispatch_uid=f"audit-before-{name}")
        post_save.connect(_saved, sender=model, dispatch_uid=f"audit-save-{name}")
        post_delete.connect(_deleted, sender=model, dispatch_uid=f"audit-delete-{name}")
    bulk_written.connect(_bulk_written, dispatch_uid="audit-bulk")


# -- reads --------------------------------------------------------------------------------------


def entries_list(*, tenant) -> QuerySet:
    """A tenant's entries, newest first: only its own, by construction."""
    return AuditEntry.objects.filter(tenant_id=tenant.id)


CSV_COLUMNS = ("created_at", "actor", "via", "address", "action", "target", "detail", "description")


def csv_response(entries: QuerySet, filename: str = "audit.csv") -> HttpResponse:
    import json

    from tenants.audit_words import describe

    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    writer = csv.writer(response)
    writer.writerow(CSV_COLUMNS)
    for entry in entries.iterator():
        row = [
            entry.created_at.isoformat(),
            entry.actor,
            entry.via,
            entry.address or "",
            entry.action,
            entry.target,
            json.dumps(entry.detail, sort_keys=True, default=str),
            describe(entry),
        ]
        # A cell starting with = + - @ is a formula to spreadsheets: quote it as text.
        writer.writerow([f"'{v}" if v[:1] in ("=", "+", "-", "@") else v for v in row])
    return response

"""Writes of a tenant's alarms (issue 46): definitions created, changed, switched on and off and
deleted; a person's acknowledgement of an active alarm.

A definition is checked as the jobs will run it (`common.alarms.definition.check`: the source,
each expression alone, the whole compiled into the rules' dialect); a bad part is a
ValidationError naming the field as the API and the portal call it. Definitions are off until
enabled: the issue wants an alarm tried on history before it is switched on. At most the plan's
`max_alarms` definitions (QuotaExceeded: a 403 that says the limit in words).

The states and transitions are the live job's to write; an acknowledgement is the one change
made here, through the same machine (`common.alarms.machine.acknowledge`), so it is the event,
the states and the time the job would record.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import validate_email
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from common.alarms import machine
from common.alarms.definition import (
    NOTIFY_KINDS,
    NOTIFY_ON,
    AlarmDefinitionError,
    AlarmSpec,
    check,
    storable_key,
)
from common.contracts.notifications import ChangeKind
from common.contracts.rule_actions import (
    RuleActionError,
    normalize_actions,
    republish_topic_problem,
)
from tenants import audit
from tenants.models import (
    AlarmDefinition,
    AlarmNotification,
    AlarmState,
    AlarmTransition,
    Tenant,
)
from tenants.models.alarms import MIN_RENOTIFY_SECONDS
from tenants.notify import announce
from tenants.quota_refusals import QuotaExceeded

log = logging.getLogger(__name__)

# Path segments beside a definition's name: /api/v1/alarms/states, /api/v1/alarms/history, the
# portal's /alarms/definitions/new/.
RESERVED_ALARM_NAMES = frozenset({"states", "history", "new", "definitions"})
MAX_NOTIFICATIONS = 10
# What the core calls a part of a definition -> what the API and the portal call it.
API_FIELDS = {
    "raise_for": "raise_for_seconds",
    "clear_for": "clear_for_seconds",
    "no_data": "no_data_seconds",
    "definition": "non_field_errors",  # the whole, compiled: no one field to blame
}
# The fields a tenant may set; those of EVALUATED change what the jobs compute (a new version).
EDITABLE = (
    "description",
    "source",
    "key",
    "raise_condition",
    "raise_for_seconds",
    "clear_condition",
    "clear_for_seconds",
    "no_data_seconds",
    "no_data_keys",
    "seen_days",
    "value",
    "severity",
    "notifications",
    "renotify_seconds",
    "enabled",
)
EVALUATED = frozenset(
    {
        "source",
        "key",
        "raise_condition",
        "raise_for_seconds",
        "clear_condition",
        "clear_for_seconds",
        "no_data_seconds",
        "no_data_keys",
        "seen_days",
        "value",
        "renotify_seconds",
    }
)
# What names a notification's target in the rules' action shape (`{"type": "webhook", "url"}`),
# which CONTRACT.md's `notify` takes too.
TARGET_ALIASES = {"webhook": "url", "republish": "topic", "email": "to"}
ACKNOWLEDGE_ON = "acknowledge"  # the `on` word of an acknowledgement's notifications


class AlarmNotActive(Exception):
    """Only an active alarm can be acknowledged: the API's 409, which says the state."""

    def __init__(self, state: AlarmState) -> None:
        self.status = state.status
        super().__init__(
            f"The alarm {state.definition.name} for {state.key!r} is {state.status}, not "
            "active: only an active alarm can be acknowledged."
        )


def alarm_spec(definition: AlarmDefinition) -> AlarmSpec:
    """What the core checks and the jobs run of a definition."""
    return AlarmSpec(
        source=definition.source,
        raise_condition=definition.raise_condition,
        key=definition.key,
        clear_condition=definition.clear_condition,
        raise_for=float(definition.raise_for_seconds),
        clear_for=None
        if definition.clear_for_seconds is None
        else float(definition.clear_for_seconds),
        no_data=None if definition.no_data_seconds is None else float(definition.no_data_seconds),
        value=definition.value,
    )


def _notification(index: int, item: Any, previous: list) -> dict[str, Any]:
    """One notification as stored: `{kind, target, on}` (a webhook's also `secret`, which signs
    its calls as a rule's webhook does; kept across edits of the same URL)."""
    where = f"notification {index + 1}"
    if not isinstance(item, dict):
        raise ValueError(f"{where}: must be an object such as {{'kind': 'email', 'target': …}}")
    kind = item.get("kind", item.get("type"))
    if kind not in NOTIFY_KINDS:
        raise ValueError(f"{where}: kind must be one of {', '.join(NOTIFY_KINDS)}")
    target = item.get("target", item.get(TARGET_ALIASES[kind]))
    if not isinstance(target, str) or not target.strip():
        raise ValueError(f"{where}: give a target (a URL, an email address or a topic)")
    on = item.get("on", list(NOTIFY_ON))
    if not isinstance(on, list) or not on or any(event not in NOTIFY_ON for event in on):
        raise ValueError(f"{where}: on must list some of {', '.join(NOTIFY_ON)}")
    stored: dict[str, Any] = {
        "kind": kind,
        "target": target,
        "on": [e for e in NOTIFY_ON if e in on],
    }
    if kind == "webhook":
        # The rules' check of a webhook (scheme, host, no credentials, WEBHOOK_ALLOW), and a
        # secret to sign with: the one this URL had, else a new one.
        try:
            [action] = normalize_actions(
                [{"type": "webhook", "url": target, "secret": item.get("secret")}],
                [{"type": "webhook", "url": p["target"], "secret": p.get("secret")}
                 for p in previous if isinstance(p, dict) and p.get("kind") == "webhook"],
            )  # fmt: skip
        except RuleActionError as exc:
            raise ValueError(f"{where}: {str(exc).split(': ', 1)[-1]}") from None
        stored["secret"] = action["secret"]
    elif kind == "email":
        try:
            validate_email(target)
        except ValidationError:
            raise ValueError(f"{where}: {target!r} is not an email address") from None
    else:
        problem = republish_topic_problem(target)
        if problem is not None:
            raise ValueError(f"{where}: {target!r} is not a topic to publish to: {problem}")
    return stored


def notifications_checked(items: Any, previous: list | None = None) -> list[dict[str, Any]]:
    """The notifications as stored, or a ValidationError on `notifications` saying which one."""
    if items is None:
        return []
    if not isinstance(items, list):
        raise ValidationError({"notifications": ["Must be a list of {kind, target, on}."]})
    if "\\u0000" in json.dumps(items):  # Postgres' jsonb takes no NUL character
        raise ValidationError({"notifications": ["Must not hold a NUL character."]})
    if len(items) > MAX_NOTIFICATIONS:
        raise ValidationError({"notifications": [f"At most {MAX_NOTIFICATIONS} notifications."]})
    try:
        return [_notification(i, item, previous or []) for i, item in enumerate(items)]
    except ValueError as exc:
        raise ValidationError(
            {"notifications": [f"{str(exc)[0].upper()}{str(exc)[1:].rstrip('.')}."]}
        ) from None


def _checked(definition: AlarmDefinition, previous_notifications: list) -> None:
    """Every part of the definition checked; a ValidationError names the first bad field."""
    definition.notifications = notifications_checked(
        definition.notifications, previous_notifications
    )
    try:
        definition.full_clean(exclude=["tenant"], validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise ValidationError(exc.message_dict) from None
    if (
        definition.renotify_seconds is not None
        and definition.renotify_seconds < MIN_RENOTIFY_SECONDS
    ):
        raise ValidationError(
            {"renotify_seconds": [f"Must be at least {MIN_RENOTIFY_SECONDS} seconds."]}
        )
    try:
        check(alarm_spec(definition))
    except AlarmDefinitionError as exc:
        field = API_FIELDS.get(exc.field, exc.field)
        raise ValidationError({field: [f"{exc.message[0].upper()}{exc.message[1:]}."]}) from None


def _room_for_one_more(tenant: Tenant) -> None:
    """QuotaExceeded when the tenant has its plan's `max_alarms` definitions already."""
    from tenants.tenant.selectors import effective_quota

    # One tenant's creations in turn: the count below cannot be raced past the limit.
    Tenant.objects.select_for_update().filter(id=tenant.id).first()
    most = effective_quota(tenant)["max_alarms"]
    if AlarmDefinition.objects.filter(tenant=tenant).count() >= most:
        raise QuotaExceeded(
            "name",
            f"Your plan ({tenant.plan.name}) allows {most} alarm "
            f"definition{'s' if most != 1 else ''} (max_alarms): delete one you no longer use "
            "first, or move to a larger plan.",
            quota="max_alarms",
            limit=most,
        )


def alarm_definition_defaults() -> dict[str, Any]:
    """What each editable field is when not given (a PUT leaves out what it resets)."""
    fresh = AlarmDefinition()
    return {field: getattr(fresh, field) for field in EDITABLE}


def alarm_definition_create(*, tenant: Tenant, name: str, **fields: Any) -> AlarmDefinition:
    """A new definition, off (`enabled` false) unless asked; refusals are counted as the
    control plane's `alarms` limit (`tenants.quota_refusals`)."""
    from tenants.quota_refusals import count_refusal

    try:
        return _create(tenant=tenant, name=name, **fields)
    except QuotaExceeded:
        count_refusal(tenant, "alarms")  # after the rollback: the count stays
        raise


@transaction.atomic
def _create(*, tenant: Tenant, name: str, **fields: Any) -> AlarmDefinition:
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise ValidationError({field: ["Unknown field."] for field in sorted(unknown)})
    if name in RESERVED_ALARM_NAMES:
        raise ValidationError({"name": [f"{name!r} is reserved; choose another name."]})
    definition = AlarmDefinition(tenant=tenant, name=name, **fields)
    _checked(definition, [])
    _room_for_one_more(tenant)
    if AlarmDefinition.objects.filter(tenant=tenant, name=name).exists():
        raise ValidationError({"name": [f"An alarm named {name!r} already exists."]})
    definition.save()
    detail: dict[str, Any] = {"enabled": definition.enabled, "severity": definition.severity}
    if definition.enabled:  # the brokers feed the live job what its source reads
        detail.update(_watch_seen_keys(definition))
        announce(tenant.slug, ChangeKind.HISTORY_CHANGED)
    audit.record(
        tenant_id=tenant.id,
        tenant_slug=tenant.slug,
        action="alarm.created",
        target=name,
        detail=detail,
    )
    return definition


@transaction.atomic
def alarm_definition_update(definition: AlarmDefinition, **fields: Any) -> AlarmDefinition:
    """Change a definition (the name is its address and stays). A change of what is evaluated
    is a new `version`; switching it on or off, its severity or its notifications are not."""
    unknown = set(fields) - set(EDITABLE)
    if unknown:
        raise ValidationError({field: ["Unknown field."] for field in sorted(unknown)})
    previous = {field: getattr(definition, field) for field in EDITABLE}
    for field, value in fields.items():
        setattr(definition, field, value)
    _checked(definition, list(previous["notifications"] or []))
    changed = sorted(f for f in EDITABLE if getattr(definition, f) != previous[f])
    if not changed:
        return definition
    if EVALUATED.intersection(changed):
        definition.version = F("version") + 1
    definition.save()
    definition.refresh_from_db(fields=["version", "updated_at"])
    detail: dict[str, Any] = {"fields": changed}
    if definition.enabled and WATCHED.intersection(changed):
        detail.update(_watch_seen_keys(definition))
    if {"enabled", "source"}.intersection(changed):  # what the brokers feed the live job
        announce(definition.tenant.slug, ChangeKind.HISTORY_CHANGED)
    audit.record(
        tenant_id=definition.tenant_id,
        tenant_slug=definition.tenant.slug,
        action="alarm.updated",
        target=definition.name,
        detail=detail,
    )
    return definition


# A change of these while on (or switching it on) looks again for the keys a `seen` alarm has.
WATCHED = frozenset({"enabled", "source", "key", "no_data_seconds", "no_data_keys", "seen_days"})


def _watch_seen_keys(definition: AlarmDefinition, store: Any = None) -> dict[str, Any]:
    """An alarm with no data over the keys *seen* is switched on: the keys its source read in
    the tenant's history over its `seen_days` get a state, watched from now — in the same
    transaction as the switch, so the live job loads them with the alarm and a device that
    fell silent before it existed raises after N seconds. Bounded by `max_alarm_keys` and by
    `ALARM_SEEN_SECONDS` (10) of reading (`common.alarms.seen`); a history that cannot be read
    leaves only the keys met from now on (logged, and said in the audit entry)."""
    if not definition.no_data_seconds or definition.no_data_keys != "seen":
        return {}
    from common.alarms.seen import seen_keys
    from common.stores.object_store import open_object_store
    from tenants.rules.runs.services import setting_number
    from tenants.tenant.selectors import effective_quota

    tenant = definition.tenant
    room = (
        effective_quota(tenant)["max_alarm_keys"]
        - AlarmState.objects.filter(tenant=tenant).exclude(definition=definition).count()
    )
    now = timezone.now()
    try:
        found = seen_keys(
            store or open_object_store(),
            tenant.slug,
            alarm_spec(definition),
            now - timedelta(days=definition.seen_days),
            now,
            limit=max(0, room),
            seconds=setting_number("ALARM_SEEN_SECONDS", 10.0),
        )
    except Exception as exc:
        log.warning("alarm %s/%s: history not read for its keys: %s", tenant.slug,
                    definition.name, exc)  # fmt: skip
        return {"seen_keys": f"history not read: {type(exc).__name__}"}
    watched = machine.KeyState()
    machine.seed(watched, now.timestamp())
    AlarmState.objects.bulk_create(
        [
            AlarmState(
                tenant=tenant, definition=definition, key=storable_key(key), machine=asdict(watched)
            )  # fmt: skip
            for key in found.keys
        ],
        ignore_conflicts=True,  # a key it has already keeps its state
    )
    return {"seen_keys": len(found.keys), "seen_keys_complete": found.complete}


def alarm_definition_enable(definition: AlarmDefinition, *, enabled: bool) -> AlarmDefinition:
    """Switch a definition on or off (its states stay; the live job starts or stops it)."""
    return alarm_definition_update(definition, enabled=enabled)


@transaction.atomic
def alarm_definition_delete(definition: AlarmDefinition) -> None:
    """Delete a definition with its states and their history."""
    tenant_id, slug, name = definition.tenant_id, definition.tenant.slug, definition.name
    enabled = definition.enabled
    definition.delete()
    if enabled:
        announce(slug, ChangeKind.HISTORY_CHANGED)
    audit.record(tenant_id=tenant_id, tenant_slug=slug, action="alarm.deleted", target=name)


def _notifications_of(written: AlarmTransition, definition: AlarmDefinition) -> None:
    """The outbox's rows of an acknowledgement (in its transaction): one per target of the
    definition whose `on` lists `acknowledge`. The live job sends the webhooks and republishes
    of any transition's rows it finds due (`spark/rules/alarm_notices.py`), the control plane
    the emails (`tenants.alarms.emails`)."""
    targets = definition.notifications if isinstance(definition.notifications, list) else []
    AlarmNotification.objects.bulk_create(
        [
            AlarmNotification(
                tenant_id=written.tenant_id,
                transition=written,
                kind=target.get("kind"),
                index=index,
                target=str(target.get("target", "")),
                next_at=written.at,
            )
            for index, target in enumerate(targets)
            if isinstance(target, dict) and ACKNOWLEDGE_ON in (target.get("on") or ())
        ]
    )


@transaction.atomic
def alarm_acknowledge(state: AlarmState, *, by: str, note: str = "") -> AlarmState:
    """A person (`by`, their email) acknowledged an active alarm: it becomes `acknowledged`
    (it clears later as an active one does) and the transition is recorded with `by` and the
    note, with a notification row for each target asked to hear of acknowledgements (one
    transaction). Any other state is AlarmNotActive (checked on the row locked, so of two
    people acknowledging at once one gets it)."""
    state = (
        AlarmState.objects.select_for_update(of=("self",))
        .select_related("definition", "tenant")
        .get(id=state.id)
    )
    now = timezone.now()
    keyed = machine.KeyState(
        status=state.status,
        since=state.since.timestamp(),
        clock=state.since.timestamp(),
        value=state.value,
        cause=state.cause,
    )
    # The job's timers are not held here (no pending, clearing or no-data clock in the row):
    # no timer fires, only the acknowledgement moves; the job fires what was due when it takes it.
    moves = machine.acknowledge(state.key, keyed, machine.Timing(), now.timestamp(), by)
    move = next((m for m in moves if m.event == machine.ACKNOWLEDGE), None)
    if move is None:
        raise AlarmNotActive(state)
    at = datetime.fromtimestamp(move.at, tz=UTC)
    state.status, state.since = move.after, at
    state.acknowledged_at, state.acknowledged_by = at, by
    state.save(
        update_fields=["status", "since", "acknowledged_at", "acknowledged_by", "updated_at"]
    )
    written = AlarmTransition.objects.create(
        tenant_id=state.tenant_id,
        definition_id=state.definition_id,
        key=state.key,
        event=move.event,
        before=move.before,
        after=move.after,
        at=at,
        value=state.value,
        cause=state.cause,
        by=by,
        note=note,
    )
    _notifications_of(written, state.definition)
    audit.record(
        tenant_id=state.tenant_id,
        tenant_slug=state.tenant.slug,
        action="alarm.acknowledged",
        target=f"{state.definition.name}/{state.key}",
        detail={"note": note[:200]} if note else None,
    )
    return state

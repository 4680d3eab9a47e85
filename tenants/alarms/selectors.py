"""Reads of a tenant's alarms (issue 46): its definitions, the state of each (alarm, key) and the
transitions of a key. Every query starts from the tenant's id, so another tenant's alarm is
never among the rows: asked for by name or id, it is a 404 as a missing one is."""

from __future__ import annotations

from django.db.models import Case, IntegerField, Prefetch, QuerySet, Value, When
from django.http import Http404

from common.alarms.machine import ACKNOWLEDGED, ACTIVE, NORMAL, PENDING
from tenants.models import (
    AlarmDefinition,
    AlarmNotification,
    AlarmState,
    AlarmTransition,
    Tenant,
)

# The order of the Alarms page: what needs a person first.
STATE_ORDER = (ACTIVE, ACKNOWLEDGED, PENDING, NORMAL)
MAX_KEY_CHARS = 255  # the longest key a state row holds
MAX_NAME_CHARS = 64


def alarm_definitions_list(*, tenant: Tenant) -> QuerySet[AlarmDefinition]:
    """The tenant's definitions, by name."""
    return AlarmDefinition.objects.filter(tenant=tenant).order_by("name")


def alarm_definitions_count(*, tenant: Tenant) -> int:
    """What counts against `max_alarms`."""
    return AlarmDefinition.objects.filter(tenant=tenant).count()


def alarm_definition_get(*, tenant: Tenant, name: str) -> AlarmDefinition:
    if len(name) > MAX_NAME_CHARS or "\x00" in name:
        raise Http404(f"No alarm named {name[:64]!r}.")  # no alarm is: not a database error
    definition = AlarmDefinition.objects.filter(tenant=tenant, name=name).first()
    if definition is None:
        raise Http404(f"No alarm named {name[:64]!r}.")
    return definition


def alarm_states_count(*, tenant: Tenant) -> int:
    """What counts against `max_alarm_keys`: every (alarm, key) state kept, all alarms."""
    return AlarmState.objects.filter(tenant=tenant).count()


def alarm_states_list(
    *,
    tenant: Tenant,
    state: str | None = None,
    severity: str | None = None,
    device: str | None = None,
    alarm: str | None = None,
) -> QuerySet[AlarmState]:
    """The tenant's alarm states, active first (then acknowledged, pending, normal), the most
    recent change first within each; filtered by state, the alarm's severity, the key (a
    device's client id) and the alarm's name, each an exact match when given."""
    rank = Case(
        *[When(status=status, then=Value(i)) for i, status in enumerate(STATE_ORDER)],
        default=Value(len(STATE_ORDER)),
        output_field=IntegerField(),
    )
    rows = AlarmState.objects.filter(tenant=tenant).select_related("definition")
    if state:
        rows = rows.filter(status=state)
    if severity:
        rows = rows.filter(definition__severity=severity)
    if device:
        rows = rows.filter(key=device)
    if alarm:
        rows = rows.filter(definition__name=alarm)
    return rows.annotate(state_rank=rank).order_by("state_rank", "-since", "id")


def alarm_state_get(*, tenant: Tenant, state_id: int) -> AlarmState:
    state = AlarmState.objects.filter(tenant=tenant, id=state_id).select_related("definition")
    found = state.first()
    if found is None:
        raise Http404(f"No alarm state {state_id}.")
    return found


def alarm_state_by_key(*, tenant: Tenant, name: str, key: str) -> AlarmState:
    """The state of `key` under the tenant's alarm `name` (404 when it has none)."""
    if len(key) > MAX_KEY_CHARS or "\x00" in key + name:
        raise Http404(f"Alarm {name[:64]!r} has no state for that key.")
    found = (
        AlarmState.objects.filter(tenant=tenant, definition__name=name, key=key)
        .select_related("definition")
        .first()
    )
    if found is None:
        raise Http404(f"Alarm {name[:64]!r} has no state for the key {key!r}.")
    return found


def _with_notifications(rows: QuerySet[AlarmTransition], tenant: Tenant) -> QuerySet:
    """Each transition with its notifications (the outbox's rows, in the definition's order),
    fetched in one more query per page rather than one per transition."""
    notices = AlarmNotification.objects.filter(tenant=tenant).order_by("index", "id")
    return rows.select_related("definition").prefetch_related(
        Prefetch("notifications", queryset=notices)
    )


def alarm_key_history(*, tenant: Tenant, state: AlarmState) -> QuerySet[AlarmTransition]:
    """The transitions of one (alarm, key), newest first, each with its notifications."""
    rows = AlarmTransition.objects.filter(
        tenant=tenant, definition_id=state.definition_id, key=state.key
    )
    return _with_notifications(rows, tenant).order_by("-at", "-id")


def alarm_device_history(*, tenant: Tenant, device: str) -> QuerySet[AlarmTransition]:
    """A key's (a device's) transitions under every alarm of the tenant, newest first, each
    with its notifications."""
    rows = AlarmTransition.objects.filter(tenant=tenant, key=device)
    return _with_notifications(rows, tenant).order_by("-at", "-id")

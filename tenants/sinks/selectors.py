"""Reads of a tenant's sinks (issue 47): each rule action of a sink type, with its state as the
rules job last wrote it (`SinkState`) and what waits in its outbox (`SinkOutbox`). Bound to the
tenant's id, so another tenant's sink is never among them; no secret is in a row (`target`
names where a sink delivers in words: a dsn's host and database, never its password)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.db.models import Count, Min
from django.http import Http404
from django.utils import timezone

from common.contracts.rule_actions import SINK_TYPES
from tenants.models import Rule, SinkOutbox, SinkState, Tenant


@dataclass(frozen=True)
class SinkRow:
    rule: str
    action: int  # 1-based, as users count (the outbox's action_index + 1)
    type: str
    target: str
    state: str
    outbox_depth: int
    oldest_at: datetime | None
    last_error: str
    last_error_at: datetime | None
    last_ok_at: datetime | None
    delivered: int
    dead: int
    resent: int
    lag_ms: int | None
    delivered_bytes: int
    last_minute: int  # outputs delivered in the last whole clock minute: its throughput
    updated_at: datetime | None


def sink_target(action: dict[str, Any]) -> str:
    """Where a sink delivers, in words, without any credential."""
    kind = action.get("type")
    if kind == "s3":
        where = f"s3://{action.get('bucket')}/{action.get('prefix', '')}"
        endpoint = action.get("endpoint_url")
        return f"{where} ({action.get('format', 'jsonl')}" + (f", {endpoint})" if endpoint else ")")
    if kind == "sqs":
        return str(action.get("queue_url"))
    if kind == "kinesis":
        return f"kinesis stream {action.get('stream')}"
    if kind == "postgres":
        try:
            parts = urlsplit(str(action.get("dsn")))
            where = f"{parts.hostname}:{parts.port or 5432}{parts.path}"
        except ValueError:
            where = "?"
        return f"postgres {where} table {action.get('table')}"
    if kind == "mqtt_bridge":
        scheme = "mqtts" if action.get("tls") else "mqtt"
        return f"{scheme}://{action.get('host')}:{action.get('port')} topic {action.get('topic')}"
    return str(action.get("url"))


def sink_actions(rule: Rule) -> list[tuple[int, dict[str, Any]]]:
    """The rule's sinks: (0-based index in its actions, the action), in their order."""
    return [
        (index, action)
        for index, action in enumerate(rule.actions or [])
        if isinstance(action, dict) and action.get("type") in SINK_TYPES
    ]


def sinks_list(*, tenant: Tenant) -> list[SinkRow]:
    """Every sink of the tenant's rules, by rule name and place: three queries (the rules, the
    states, the outbox counted per sink)."""
    rules = list(Rule.objects.filter(tenant=tenant).order_by("name"))
    states = {(s.rule_id, s.action_index): s for s in SinkState.objects.filter(tenant=tenant)}
    waiting = {
        (row["rule_id"], row["action_index"]): row
        for row in SinkOutbox.objects.filter(tenant=tenant)
        .values("rule_id", "action_index")
        .annotate(depth=Count("id"), oldest=Min("created_at"))
        .order_by()
    }
    rows = []
    now = timezone.now()
    for rule in rules:
        for index, action in sink_actions(rule):
            state = states.get((rule.id, index))
            queued = waiting.get((rule.id, index)) or {}
            rows.append(
                SinkRow(
                    rule=rule.name,
                    action=index + 1,
                    type=action["type"],
                    target=sink_target(action),
                    state=state.state if state else SinkState.State.OK,
                    outbox_depth=queued.get("depth", 0),
                    oldest_at=queued.get("oldest"),
                    last_error=state.last_error if state else "",
                    last_error_at=state.last_error_at if state else None,
                    last_ok_at=state.last_ok_at if state else None,
                    delivered=state.delivered if state else 0,
                    dead=state.dead if state else 0,
                    resent=state.resent if state else 0,
                    lag_ms=state.lag_ms if state else None,
                    delivered_bytes=state.delivered_bytes if state else 0,
                    last_minute=last_minute_delivered(state, now) if state else 0,
                    updated_at=state.updated_at if state else None,
                )
            )
    return rows


def last_minute_delivered(state: SinkState, now: datetime) -> int:
    """What the sink delivered in the last whole clock minute before `now`: the sender counts
    per minute as it settles, so a minute it settled nothing in is a minute of none."""
    if state.minute_at is None:
        return 0
    this_minute = now.replace(second=0, microsecond=0)
    if state.minute_at == this_minute:
        return state.previous_minute_delivered
    if state.minute_at == this_minute - timedelta(minutes=1):
        return state.minute_delivered
    return 0


def sink_action_get(*, rule: Rule, number: int) -> dict[str, Any]:
    """The rule's action `number` (1-based) if it is a sink (opened: its credentials in the
    clear, for the connection test only); a 404 otherwise."""
    actions = rule.actions or []
    if not 1 <= number <= len(actions):
        raise Http404(f"Rule {rule.name!r} has no action {number}.")
    action = actions[number - 1]
    if not isinstance(action, dict) or action.get("type") not in SINK_TYPES:
        kind = action.get("type") if isinstance(action, dict) else None
        raise Http404(f"Action {number} of rule {rule.name!r} is a {kind} action, not a sink.")
    return action

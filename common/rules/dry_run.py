"""The API's rule test (POST /api/v1/rules/test), as EMQX's rule tester does it.

The context describes one message (or lifecycle event); fields it leaves out get EMQX's example
values. FROM must take the context's topic (or event) — otherwise no match, as in EMQX — and the
rule then runs with exactly the compiled semantics the Spark jobs use.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from common.archive.schema import EVENT_PUBLISH, EVENT_TOPICS, SHADOW_EVENTS
from common.rules.budget import Budget, BudgetExceeded
from common.rules.compiler import compile_rule
from common.rules.errors import RuleRuntimeError

EXAMPLE = {
    "topic": "t/a",
    "payload": '{"msg": "hello"}',
    "qos": 1,
    "clientid": "c_emqx",
    "username": "u_emqx",
    "peerhost": "192.168.0.10",
    "peername": "192.168.0.10:56431",
    "reason": "normal",
    "proto_ver": 5,
    "keepalive": 60,
    "clean_start": True,
    "expiry_interval": 3600,
}

_EVENT_NAMES = {**{v: v for v in EVENT_TOPICS.values()}, **EVENT_TOPICS}
_EVENT_NAMES.update({name.replace(".", "_"): name for name in EVENT_TOPICS.values()})
_EVENT_NAMES[EVENT_PUBLISH] = EVENT_PUBLISH
_EVENT_NAMES["message_publish"] = EVENT_PUBLISH
# Rows that carry a payload: messages, and the device shadows' events (their documents).
_WITH_PAYLOAD = frozenset({EVENT_PUBLISH, *SHADOW_EVENTS.values()})


def _payload_bytes(payload: Any) -> bytes:
    if isinstance(payload, bytes):
        return payload
    if isinstance(payload, str):
        return payload.encode()
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def _user_properties(value: Any) -> list[dict[str, str]]:
    if not value:
        return []
    if isinstance(value, dict):
        return [{"key": str(k), "value": str(v)} for k, v in value.items()]
    out = []
    for item in value:
        if isinstance(item, dict):
            out.append({"key": str(item.get("key")), "value": str(item.get("value"))})
        else:
            key, val = item
            out.append({"key": str(key), "value": str(val)})
    return out


def _peer(context: dict[str, Any]) -> str:
    """The archive's `peer` (host:port) for the context: its `peername`, else its `peerhost`
    (what `peerhost`, `clientip()` and `peerhost()` then give), else EMQX's example."""
    if context.get("peername") is not None:
        return str(context["peername"])
    host = context.get("peerhost")
    if host is None:
        return str(EXAMPLE["peername"])
    host = str(host)
    return f"[{host}]:0" if ":" in host else f"{host}:0"


def context_row(context: dict[str, Any]) -> dict[str, Any]:
    """A dry-run context as an archive row (what the jobs read), with example values filled."""
    raw_event = context.get("event") or EVENT_PUBLISH
    event = _EVENT_NAMES.get(str(raw_event))
    if event is None:
        known = ", ".join(sorted({EVENT_PUBLISH, *EVENT_TOPICS.values()}))
        raise RuleRuntimeError(f"unknown event {raw_event!r} in context: use one of {known}")
    ctx = {**EXAMPLE, **{k: v for k, v in context.items() if v is not None}}
    timestamp = ctx.get("timestamp")
    if timestamp is None:
        timestamp = int(time.time() * 1000)
    if not isinstance(timestamp, int) or isinstance(timestamp, bool):
        raise RuleRuntimeError("context.timestamp must be milliseconds since the epoch")
    qos = ctx.get("qos")
    if qos not in (0, 1, 2):
        raise RuleRuntimeError("context.qos must be 0, 1 or 2")
    peer = _peer(context)
    retain = ctx.get("retain")
    if retain is None and isinstance(ctx.get("flags"), dict):
        retain = ctx["flags"].get("retain")
    return {
        "event": event,
        "tenant": "dry-run",
        "ts": timestamp,
        "client_id": str(ctx["clientid"]),
        "username": None if ctx.get("username") is None else str(ctx["username"]),
        "topic": None if ctx.get("topic") is None else str(ctx["topic"]),
        "qos": qos,
        "retain": bool(retain),
        "payload": _payload_bytes(ctx.get("payload", "")) if event in _WITH_PAYLOAD else None,
        "user_properties": _user_properties(ctx.get("user_properties")),
        "content_type": ctx.get("content_type"),
        "response_topic": ctx.get("response_topic"),
        "reason": ctx.get("reason"),
        "peer": peer,
        "proto_ver": ctx.get("proto_ver"),
        "keepalive": ctx.get("keepalive"),
        "clean_start": ctx.get("clean_start"),
        "session_expiry": ctx.get("expiry_interval"),
    }


def dry_run(
    sql: str,
    context: dict[str, Any],
    budget: Budget | None = None,
    rule_id: str | None = None,
) -> dict[str, Any]:
    """{"match": True, "outputs": [...]} or {"match": False}; RuleSyntaxError for bad SQL,
    RuleRuntimeError when evaluation fails (bad JSON payload, a function's bad argument), its
    subclass BudgetExceeded when the rule goes over `budget` (the jobs' own budgets: time,
    outputs, sizes; `common.rules.budget`). `metadata.rule_id` is `rule_id`, else a
    `sql_tester:…` id of its own, as EMQX's rule tester gives."""
    rule = compile_rule(sql)
    if not isinstance(context, dict):
        raise RuleRuntimeError("context must be an object")
    row = context_row(context)
    if not rule.reads(row["event"], row["topic"]):
        return {"match": False}
    if rule_id is None:
        rule_id = f"sql_tester:{secrets.token_hex(8)}"
    result = rule.apply(row, budget, rule_id)
    if result.budget is not None:
        raise BudgetExceeded.again(result.budget, result.error or "")
    if result.error is not None:
        raise RuleRuntimeError(result.error)
    if not result.matched:
        return {"match": False}
    return {"match": True, "outputs": result.outputs}

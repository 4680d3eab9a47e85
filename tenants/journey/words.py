"""The journey's rows in words a person understands (the API's and the portal's `reason`).

The broker writes the reason it gave the client (refusals) or a short cause (later drops); the
outcomes it decides for every message (`delivered`, `no_subscribers`) carry none, to keep those
rows small, and are put in words here. A reason code is always shown with its meaning.
"""

from __future__ import annotations

from typing import Any

from tenants.devices.disconnect_reasons import CODES
from tenants.devices.disconnect_reasons import describe as describe_disconnect
from tenants.usage.throttling_words import LIMITS

OUTCOME_WORDS = {
    "delivered": "delivered",
    "no_subscribers": "no session subscribes to this topic: nobody received it",
    "acl_denied": "refused: the device may not publish on this topic (ACL)",
    "quota_exceeded": "refused: over a limit of the plan",
    "queue_full": "lost at a subscriber: its queue was full",
    "expired": "lost at a subscriber: it expired before delivery",
    "too_large": "refused: larger than allowed",
    "dropped": "dropped",
    "served": "taken by the device shadow service",
    "rule_matched": "matched",
    "rule_failed": "failed on this message",
    "rule_action_ok": "action done",
    "rule_action_failed": "action failed",
    "alarm_changed": "an alarm changed state",
}


def code_text(code: int | None, event: str | None = None) -> str | None:
    """`0x97 Quota exceeded`: a reason code with its name (MQTT 5.0, 2.4). 0x00 is named by
    the packet that carries it: "Success" in the CONNACK of a `connected` event, "Normal
    disconnection" where a connection ended (CODES' name)."""
    if code is None:
        return None
    if code == 0 and event == "connected":
        return "0x00 Success"
    title = CODES.get(code, ("",))[0]
    return f"0x{code:02X} {title}".strip()


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def outcome_reason(row: dict[str, Any]) -> str:
    outcome = row["outcome"]
    if outcome == "delivered":
        sessions, queued = row.get("sessions") or 0, row.get("queued") or 0
        lost = row.get("lost") or 0
        if lost:  # some dropped it as it arrived: the row's reason says who and why
            words = f"delivered to {sessions - lost} of {_plural(sessions, 'session')}"
        else:
            words = f"delivered to {_plural(sessions, 'session')}"
        if queued:
            words += f" ({queued} offline: kept in {'its' if queued == 1 else 'their'} queue)"
        if lost:
            return f"{words}: {row.get('reason') or f'dropped by {lost}'}"
        if row.get("reason"):  # a will
            words = f"{row['reason']}: {words}"
        return words
    detail = row.get("reason")
    if outcome.startswith("rule_"):  # the rules job's rows: the rule, then what it did
        words = f"rule {row.get('rule') or '?'}: {OUTCOME_WORDS.get(outcome, outcome)}"
        return f"{words}: {detail}" if detail else words
    if row.get("subscriber"):  # lost at one subscriber: the broker's words say why
        if row.get("message_id"):  # as it arrived: the message's own row shares the id
            return f"dropped as it arrived at subscriber {row['subscriber']}: {detail or outcome}"
        return f"lost at subscriber {row['subscriber']}: {detail or outcome}"
    base = OUTCOME_WORDS.get(outcome, outcome)
    if outcome == "served" and "/jobs/" in (row.get("topic") or ""):
        base = "taken by the jobs service"  # `$aws/things/{thing}/jobs/…` (issue 32)
    if outcome == "quota_exceeded" and row.get("quota"):
        base = f"refused: over the plan's {row['quota']}"
    return f"{base}: {detail}" if detail and detail not in base else base


def describe_outcome(row: dict[str, Any]) -> dict[str, Any]:
    code = row.get("reason_code")
    return {
        "time": row["ts"],
        "client_id": row.get("client_id"),
        "topic": row.get("topic"),
        "qos": row.get("qos"),
        "size": row.get("size"),
        "packet_id": row.get("packet_id"),
        "outcome": row["outcome"],
        "sessions": row.get("sessions"),
        "queued": row.get("queued"),
        "quota": row.get("quota"),
        "subscriber": row.get("subscriber"),
        "reason_code": code,
        "reason_code_text": code_text(code),
        "reason": outcome_reason(row),
        "node": row.get("node"),
        "rule": row.get("rule"),
        # Set where a subscriber dropped the message as it arrived: the message's own row and
        # its drop rows share it; `lost` (on the message's row) counts those drops.
        "message_id": row.get("message_id"),
        "lost": row.get("lost"),
        # The rules' rows: from the publish to the match or the action done.
        "latency_ms": row.get("latency_ms"),
    }


EVENT_WORDS = {
    "connected": "connected",
    "connect_failed": "connection refused",
    "disconnected": "disconnected",
    "taken_over": "taken over by a newer connection with the same client id",
    "subscribed": "subscribed",
    "unsubscribed": "unsubscribed",
    "will_published": "its will was published",
    "will_discarded": "its will was refused",
    "session_expired": "its session expired",
    "replayed": "replayed history",
}


def takeover_words(row: dict[str, Any]) -> str | None:
    """Where a session came from (`connected`) or went (`taken_over`), naming the other node:
    "where did my client go?". None where the row names none (no takeover, or written before
    the broker recorded the nodes)."""
    here = row.get("node")
    if row["event"] == "connected" and row.get("from_node"):
        there = row["from_node"]
        if there == here:
            return f"took the session over from an older connection at this same node ({here})"
        return f"session taken over from node {there} (now at node {here})"
    if row["event"] == "taken_over" and row.get("to_node"):
        there = row["to_node"]
        if there == here:
            return f"taken over by a newer connection at this same node ({here})"
        return f"taken over by a newer connection at node {there} (the session went there)"
    return None


# What the broker records for a refused CONNECT that came with no reason of its own
# (data_plane/broker/refused.py): the reason code says more.
UNSAID_REFUSAL = "authentication failed"


def disconnect_words(recorded: str | None, code: int | None) -> str:
    """A `disconnected` row's reason in words. The broker records a token (`tcp_closed`,
    `keepalive_timeout`, `0x95`…, `tenants.devices.disconnect_reasons`), never shown as is."""
    described = describe_disconnect(recorded or "")
    if described is not None and described.title != recorded:
        return described.sentence
    if code is not None and code in CODES:  # words of its own (not a token), with the code's
        title, detail = CODES[code]
        return f"{recorded} ({title})" if recorded else f"{title}: {detail}"
    return recorded or EVENT_WORDS["disconnected"]


def describe_event(row: dict[str, Any]) -> dict[str, Any]:
    code = row.get("reason_code")
    event = row["event"]
    reason = takeover_words(row) or row.get("reason")
    if event == "connect_failed" and reason in LIMITS:  # a limit's key: its words
        reason = LIMITS[reason].refused
    elif event == "connect_failed" and reason in (None, "", UNSAID_REFUSAL) and code in CODES:
        reason = "{}: {}".format(*CODES[code])  # e.g. 0x9C: sent to another server
    elif event == "disconnected":
        reason = disconnect_words(reason, code)
    return {
        "time": row["ts"],
        "event": event,
        "version": row["version"],
        "reason_code": code,
        "reason_code_text": code_text(code, event),
        "reason": reason or EVENT_WORDS.get(row["event"], row["event"]),
        "initiator": row.get("initiator"),
        "detail": row.get("detail"),
        "node": row.get("node"),
        "from_node": row.get("from_node"),
        "to_node": row.get("to_node"),
    }

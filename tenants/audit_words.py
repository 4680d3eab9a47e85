"""An audit entry in words ("Device lamp created", "Quota max_connections changed from 10 to
20"), for the portal's audit page, the API's `description` and the CSV.

Read from what an entry keeps (`action`, `target`, `detail`: the fields changed and, since
entries carry them, what each safe field was and became), so older entries read in words too,
with less to say. Never a value the entry does not hold: secrets never enter an entry.
"""

from __future__ import annotations

from typing import Any

# Each audited model, as a tenant calls it.
_THINGS = {
    "tenant": "Tenant",
    "device": "Device",
    "credential": "Secret",
    "aclrule": "ACL rule",
    "rule": "Rule",
    "apitoken": "API token",
    "membership": "Member",
    "cacertificate": "CA certificate",
    "devicecertificate": "Device certificate",
    "jwtkey": "JWT key",
    "credit": "Credit",
    "invitation": "Invitation for",
    "historypolicy": "History policy",
    "budget": "Budget",
    "billingdetails": "Billing details",
    "shared_group": "Shared group",  # not a model's: shared_groups.services records it
}
_VERBS = {"created": "created", "updated": "changed", "deleted": "deleted"}
# Field changes that read better as one word than as "from … to …".
_SWITCHES = {
    ("enabled", True): "enabled",
    ("enabled", False): "disabled",
    ("budget_degraded", True): "degraded (budget reached)",
    ("budget_degraded", False): "no longer degraded",
}


def _value(value: Any) -> str:
    if value is None or value == "":
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, dict):
        return ", ".join(f"{k} {_value(v)}" for k, v in sorted(value.items())) or "none"
    if isinstance(value, list):
        return ", ".join(_value(v) for v in value) or "none"
    return str(value)


def _field(name: str) -> str:
    return name.removesuffix("_id").replace("_", " ")


def _quota_words(old: dict | None, new: dict | None) -> list[str]:
    old, new = old or {}, new or {}
    words = []
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if before is None:
            words.append(f"Quota {key} set to {_value(after)} (was the plan's)")
        elif after is None:
            words.append(f"Quota {key} back to the plan's (was {_value(before)})")
        else:
            words.append(f"Quota {key} changed from {_value(before)} to {_value(after)}")
    return words


def _change_words(thing: str, changes: dict) -> list[str]:
    words = []
    for field, (before, after) in sorted(changes.items()):
        if field == "quota_overrides":
            words += _quota_words(before, after)
        elif (field, after) in _SWITCHES:
            words.append(f"{thing} {_SWITCHES[field, after]}")
        elif field == "revoked_at" and after:
            words.append(f"{thing} revoked")
        else:
            words.append(
                f"{thing}: {_field(field)} changed from {_value(before)} to {_value(after)}"
            )
    return words


def describe_parts(action: str, target: str, detail: dict | None) -> str:
    detail = detail or {}
    model, _, verb = action.partition(".")
    name = _THINGS.get(model, model.capitalize())
    if model == "credential" and "/" in target:
        device, _, number = target.rpartition("/")
        thing = f"Secret {number} of device {device}"
    elif model == "apitoken":
        thing = f"{name} {target}…"  # its prefix
    else:
        thing = f"{name} {target}".strip()
    if model == "membership":
        role = detail.get("role")
        if verb == "created":
            return f"{target} joined as {role}" if role else f"{target} joined"
        if verb == "deleted":
            return f"{target} removed from the tenant"
    if model == "invitation" and verb == "created" and detail.get("role"):
        return f"{thing} created (as {detail['role']})"
    if verb == "updated":
        fields = detail.get("fields") or []
        if model == "invitation" and "accepted_at" in fields:
            return f"{thing} accepted"
        words = _change_words(thing, detail.get("changes") or {})
        if words:
            return "; ".join(words)
        if fields:
            return f"{thing} changed: {', '.join(_field(f) for f in fields)}"
    return f"{thing} {_VERBS.get(verb, verb)}"


def describe(entry) -> str:
    """The entry (an `AuditEntry`) in words."""
    return describe_parts(entry.action, entry.target, entry.detail)

"""The OpenAPI words of the alarm endpoints (tenants/api/alarm_views.py), merged into
`tenants.api.docs`."""

from __future__ import annotations

ALARMS_TAG = {
    "name": "Alarms",
    "description": "Conditions that must hold for a while, devices gone silent, and an alarm per "
    "(alarm, key) raised once, acknowledged by a person and cleared: definitions, each key's "
    "state (normal, pending, active, acknowledged) and its transitions.",
}

_404 = "Another tenant's alarm is a 404, as a missing one is."
_STATE_BY_ID = "The state is named by its id (as listed by `GET /api/v1/alarms/states`)."
_STATE_BY_KEY = (
    "The state is named by the alarm's name and the key (a device's client id by default; it "
    "may hold `/`)."
)
_ACK = (
    "Acknowledges an active alarm: it becomes `acknowledged` (and still clears as an active "
    "one does), and the transition is recorded with `by` (the caller's email) and the optional "
    "`note`. Any other state is a 409 that says it (`state`). Answers the state. "
)
_KEY_HISTORY = "The key's transitions under this alarm, newest first, paged (`event`, `before`, `after`, `at`, `value`, `cause`, `message_id`: the message that made it, `by`, `note`, and its `notifications`: `kind`, `target`, `state`, `attempts`, `last_error`, `sent_at`). "

ALARM_OPERATIONS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("post", "/api/v1/alarms/{name}/preview"): (
        "Alarms",
        "Preview an alarm over history",
        "`{from, to}` (ISO 8601 with a zone; at most 7 days, to now): the alarm, on or off, over "
        "the tenant's archived messages of the range, as the live job would run it: `raised` "
        "(times a key became active), `keys` (the most raised first, with `active_seconds`, "
        "`longest_seconds`, `state_at_end`), the first `transitions` in time order, and the "
        "figures `read`, `considered`, `failed`, `complete`. Nothing is stored or notified. "
        "Throttled per tenant (429). " + _404,
    ),
    ("get", "/api/v1/alarms"): (
        "Alarms",
        "List the tenant's alarm definitions",
        "Every alarm definition of the tenant, by name, paged. Also at "
        "`/api/v1/alarm-definitions`.",
    ),
    ("post", "/api/v1/alarms"): (
        "Alarms",
        "Define an alarm",
        "`{name, source, key?, raise_condition, raise_for_seconds?, clear_condition?, "
        "clear_for_seconds?, no_data_seconds?, no_data_keys?, seen_days?, value?, severity?, "
        "notifications?, renotify_seconds?, enabled?}` (CONTRACT.md's `raise`, `for_seconds`, "
        "`clear` and `notify` are taken for the same fields). Each expression is checked in the "
        "rules' dialect; a bad part is a 400 naming its field; neither a raise condition nor a "
        "no-data window is a 400 on `raise_condition`. Off (`enabled` false) unless asked: try "
        "it on history first. At most the plan's `max_alarms` definitions (else a 403, code "
        "`quota_exceeded`, saying the limit in words).",
    ),
    ("get", "/api/v1/alarms/{name}"): (
        "Alarms",
        "Read an alarm definition",
        "The definition with its `version` (one more at each change of what is evaluated). "
        "A webhook notification's `secret` is shown to members who can write. " + _404,
    ),
    ("put", "/api/v1/alarms/{name}"): (
        "Alarms",
        "Replace an alarm definition",
        "Every field as given, those left out back to their defaults (`enabled` false "
        "included); checked as a new one. The name stays. " + _404,
    ),
    ("patch", "/api/v1/alarms/{name}"): (
        "Alarms",
        "Change part of an alarm definition",
        'The fields given, checked with the rest as a whole; `{"enabled": true}` switches it '
        "on. A change of what is evaluated (source, key, conditions, durations, value, no "
        "data, re-notification) is a new `version`. " + _404,
    ),
    ("delete", "/api/v1/alarms/{name}"): (
        "Alarms",
        "Delete an alarm definition",
        "The definition goes with every state and transition it had; answers 204. " + _404,
    ),
    ("get", "/api/v1/alarms/states"): (
        "Alarms",
        "List the alarms' states",
        "One row per (alarm, key): active first, then acknowledged, pending and normal, the "
        "most recent change first within each, paged. Filters: `state`, `severity`, `device` "
        "(the key) and `alarm` (the name); an unknown state or severity is a 400 naming it.",
    ),
    ("get", "/api/v1/alarms/history"): (
        "Alarms",
        "A device's alarm transitions across alarms",
        "Every transition of the key `device` (required) under any of the tenant's alarms, "
        "newest first, paged.",
    ),
    ("get", "/api/v1/alarms/states/{state_id}"): (
        "Alarms",
        "Read one alarm state by id",
        "One (alarm, key)'s state: since when, its value, its cause, who acknowledged. "
        + _STATE_BY_ID
        + " "
        + _404,
    ),
    ("post", "/api/v1/alarms/states/{state_id}/acknowledge"): (
        "Alarms",
        "Acknowledge an alarm by its state's id",
        _ACK + _STATE_BY_ID + " " + _404,
    ),
    ("get", "/api/v1/alarms/states/{state_id}/history"): (
        "Alarms",
        "One key's alarm history, by state id",
        _KEY_HISTORY + _STATE_BY_ID + " " + _404,
    ),
    ("get", "/api/v1/alarms/{name}/states/{key}"): (
        "Alarms",
        "Read one alarm state by alarm and key",
        "One (alarm, key)'s state, as a row of the list. " + _STATE_BY_KEY + " " + _404,
    ),
    ("post", "/api/v1/alarms/{name}/states/{key}/acknowledge"): (
        "Alarms",
        "Acknowledge an alarm by alarm and key",
        _ACK + _STATE_BY_KEY + " " + _404,
    ),
    ("get", "/api/v1/alarms/{name}/states/{key}/history"): (
        "Alarms",
        "One key's alarm history, by alarm and key",
        _KEY_HISTORY + _STATE_BY_KEY + " " + _404,
    ),
}

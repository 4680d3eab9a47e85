"""The OpenAPI words of the inspection endpoints (tenants/api/inspection_views.py), merged into
`tenants.api.docs`."""

from __future__ import annotations

NOT_METERED = "Not metered: reading it costs nothing."
STALE = (
    "An online session's `queued` and `inflight` are a sample its broker node writes every few "
    "seconds (up to about 6 s old); an offline session's are counted from its durable queue."
)

INSPECTION_TAG = {
    "name": "Inspection",
    "description": "What the broker holds for the tenant, across every node of the cluster: "
    "sessions (online and offline), their queues, retained messages, the topic tree and "
    "durable shared groups.",
}

INSPECTION_OPERATIONS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("get", "/api/v1/sessions"): (
        "Inspection",
        "List the tenant's MQTT sessions",
        "Every session, online (a live connection: with its `node`, `clean_start`, since when "
        "and device) and offline (a persistent session waiting for its client, with "
        "`expires_at`), by client id, paged; `client` filters by a part of the client id, "
        "`online` by state. " + STALE + " " + NOT_METERED,
    ),
    ("get", "/api/v1/sessions/{client_id}"): (
        "Inspection",
        "Show one MQTT session",
        "One session as in the list, plus its `subscriptions` (filter, QoS and options) and, "
        "online, the connection's address, protocol version and transport. Another tenant's "
        "client id is a 404, as a client id without a session is.",
    ),
    ("get", "/api/v1/sessions/{client_id}/queue"): (
        "Inspection",
        "Browse a session's queued messages",
        "The durable queue of a persistent session in order (QoS 1 and 2 deliveries: waiting, "
        "or sent and not yet acknowledged), paged, each with its topic, QoS, size, state and a "
        "payload preview as JSON, text or hex (at most 1 KiB). A clean session's queue lives in "
        "its broker's memory only: its depth is in the session, its messages are not listed.",
    ),
    ("get", "/api/v1/retained"): (
        "Inspection",
        "Browse retained messages",
        "The tenant's retained messages whose topic `topic` matches (an MQTT filter: `+` one "
        "level, `#` the rest; `#` does not match topics starting with `$`), by topic, paged, "
        "each with QoS, size and a payload preview. A malformed filter is a 400 naming the "
        "problem. " + NOT_METERED,
    ),
    ("delete", "/api/v1/retained"): (
        "Inspection",
        "Delete retained messages",
        "Deletes the retained message on the topic `topic`, or every one a filter matches "
        "(`a/#`), and answers how many went. Every broker node forgets them at once: a new "
        "subscriber no longer receives them. Recorded in the audit log. Owners and admins only.",
    ),
    ("get", "/api/v1/topics"): (
        "Inspection",
        "Show the tenant's topic tree",
        "The topics the tenant has, as a tree of levels: the topics of its retained messages "
        "and the filters its sessions subscribe with (a node per level, with `retained`, "
        "`subscriptions` and `messages_per_minute`, the last 5 minutes' rate from the journey), "
        "under `topic` (default `#`). At most 5,000 nodes (`truncated` says when cut).",
    ),
}

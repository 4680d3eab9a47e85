"""The OpenAPI words of the journey endpoints (tenants/api/journey_views.py), merged into
`tenants.api.docs`."""

from __future__ import annotations

JOURNEY_TAG = {
    "name": "Journey",
    "description": "Where each message went and what each client lived: every PUBLISH's outcome "
    "with its reason in words, and every connect, disconnect, subscription, will and session "
    "expiry, kept for the plan's journey retention.",
}

JOURNEY_OPERATIONS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("get", "/api/v1/journey"): (
        "Journey",
        "Find what became of the tenant's messages",
        "One row per outcome of a PUBLISH, newest first: delivered (with the sessions reached and "
        "how many keep it offline), no_subscribers, acl_denied, quota_exceeded (with the quota "
        "key), too_large, and at one subscriber later queue_full, expired or dropped. Filter by "
        "`topic` (an MQTT filter), `client` (the publisher) and `outcome` (comma-separated), "
        "within `from`/`to` (default: the last 24 hours); `next` pages to older rows. Each row "
        "carries the reason code the client got with its meaning and the reason in words.",
    ),
    ("get", "/api/v1/clients/{client_id}/events"): (
        "Journey",
        "Follow one client's life",
        "The client's events, newest first: connected, connect_failed (with the CONNACK code "
        "and why), disconnected (who initiated it, the reason code and its meaning), taken_over, "
        "subscribed and unsubscribed (the filter and granted QoS), will_published, "
        "will_discarded and session_expired. `version` grows with each event, so the order is "
        "never in doubt. Another tenant's client ids give no rows.",
    ),
}

"""The OpenAPI words of the sink endpoints (tenants/api/sink_views.py), merged into
`tenants.api.docs`; under the Rules tag, since a sink is a rule's action."""

from __future__ import annotations

SINK_OPERATIONS: dict[tuple[str, str], tuple[str, str, str]] = {
    ("get", "/api/v1/sinks"): (
        "Rules",
        "List the tenant's sinks",
        "Every rule action of a sink type (`s3`, `sqs`, `kinesis`, `postgres`, `mqtt_bridge`, "
        "`http_batch`) of the tenant's rules, by rule name and place, paged: `rule`, `action` "
        "(its place in the rule's actions, from 1), `type`, `target` (where it delivers, in "
        "words, no credential), `state` (`ok`, `retrying`, `failing`), `outbox_depth` (outputs "
        "waiting for it) and `oldest_at` (when the oldest was queued; null when none), "
        "`last_error` in words with `last_error_at`, `last_ok_at`, `lag_ms`, the counters "
        "`delivered` (with `delivered_bytes`), `resent` and `dead` (dead-lettered), and "
        "`last_minute` (outputs delivered in the last whole minute: its throughput). A sink the rules job has not run yet is `ok` with zeros. "
        "Its settings are the rule's actions (`/api/v1/rules/{name}`).",
    ),
    ("post", "/api/v1/rules/{name}/actions/{number}/test"): (
        "Rules",
        "Test a sink's connection",
        "Connects to the far end of the rule's action `number` (from 1) with its settings and "
        "credentials as stored, as the rules job would, and answers `{ok: true}` or `{ok: false, "
        "error}` with what went wrong in words (a refused address, wrong credentials, a missing "
        "bucket, queue, stream or table, a broker that refused the connection). Nothing is "
        "delivered. An action that is not a sink, or another tenant's rule, is a 404. Owners and "
        "admins only; throttled per tenant (429 with Retry-After, `SINK_TEST_RATE`, 20 a minute "
        "by default).",
    ),
}

"""The live view's Prometheus figures, per web process (served on `WEB_METRICS_PORT`,
control_plane/web_metrics.py). Labels are bounded: `tenant` is only ever a tenant whose member
logged in (the consumer checks the membership first), `limit` one of `member`, `tenant`."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

VIEWERS = Gauge("portal_live_viewers", "Live pages open (/ws/live/ sockets)", ["tenant"])
BROKER_CONNECTIONS = Gauge(
    "portal_live_broker_connections",
    "Broker connections of the live views: one per tenant with a live page open",
)
REFUSED = Counter(
    "portal_live_refused",
    "Live sockets refused: the member's or the tenant's bound reached",
    ["tenant", "limit"],
)
SHOWN = Counter("portal_live_messages_shown", "Watched messages sent to live pages", ["tenant"])
NOT_SHOWN = Counter(
    "portal_live_messages_not_shown",
    "Watched messages not sent to a page over its rate (50 a second a page)",
    ["tenant"],
)
BACKLOG_DROPPED = Counter(
    "portal_live_backlog_dropped",
    "Messages of the tenant's live subscription dropped before dispatch: the process fell behind",
    ["tenant"],
)

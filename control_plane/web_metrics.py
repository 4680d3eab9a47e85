"""The web process's Prometheus `/metrics` (the live views' figures: tenants/portal/live_metrics.py),
on its own port, `WEB_METRICS_PORT`, bound on `BIND_HOST`: never on the portal's public port,
where anyone could read every tenant's name. Unset, nothing is served."""

from __future__ import annotations

import os

from prometheus_client import start_http_server


def serve_from_environment() -> int | None:
    """Start serving `/metrics` on a thread if `WEB_METRICS_PORT` is set; the port, or None."""
    port = os.environ.get("WEB_METRICS_PORT", "")
    if not port:
        return None
    start_http_server(int(port), addr=os.environ.get("BIND_HOST", "127.0.0.1"))
    return int(port)

"""`$SYS/broker/...`: each tenant's own figures, published retained into its own namespace
(clients connected and online, messages and bytes, drops, refusals, subscriptions, uptime)."""

from __future__ import annotations

import json
import time
from collections import defaultdict
from typing import Any

from data_plane.broker.message import Message
from data_plane.broker.session import Delivery


def publish_sys(broker: Any) -> None:
    """Each tenant's own figures under its own `$SYS/broker/...`, retained."""
    uptime = int(time.time() - broker.started)
    online: dict[str, set[str]] = defaultdict(set)
    watched: set[str] = set()  # tenants with a live view open, even before any client
    for conn in broker.connections:
        if conn.session is None:
            continue
        if conn.auth.service:
            watched.add(conn.tenant)
        else:
            online[conn.tenant].add(conn.device)
    # The cluster's live nodes (data_plane.cluster), when this process is one of several.
    nodes = None
    if broker.cluster is not None:
        nodes = json.dumps(sorted(m["node"] for m in broker.cluster.members()))
    for tenant in watched.union(broker.stats):
        stats = broker.stats[tenant]
        router = broker.router.tenants.get(tenant)
        figures = {
            "clients/connected": stats.connected,
            # Application messages only (PUBLISH in, deliveries out), as usage meters them.
            "messages/received": stats.messages_received - stats.system_received,
            "messages/sent": stats.messages_sent - stats.system_sent,
            "bytes/received": stats.bytes_received - stats.system_bytes_received,
            "bytes/sent": stats.bytes_sent - stats.system_bytes_sent,
            "messages/dropped": stats.dropped,
            "quota/rate_limited": stats.rate_limited,
            "acl/denied": stats.denied,
            "subscriptions/count": router.count if router else 0,
            "retained messages/count": broker.retained.count(tenant),
            "uptime": uptime,
            # Which devices are connected (bounded): the portal's presence snapshot.
            "clients/online": _online_list(online.get(tenant, ())),
            **{f"quota/exceeded/{key}": n for key, n in stats.exceeded.items()},
            **{f"quota/throttled/{key}": n for key, n in stats.throttled.items()},
        }
        if nodes is not None:  # a cluster: the tenant's figures summed over its nodes
            figures = broker.cluster.figures(tenant, figures)
            figures["nodes"] = nodes
        for name, value in figures.items():
            message = Message(
                f"$SYS/broker/{name}",
                str(value).encode(),
                0,
                True,
                tenant=tenant,
                publisher="$SYS",
            )
            broker.retained.set(message)
            for sub in broker.router.match(tenant, message.topic)[0]:
                sub.session.deliver(Delivery(message, 0, sub.retain_as_published))


ONLINE_LIST_LIMIT = 1000


def _online_list(devices: Any) -> str:
    names = sorted(devices)
    return json.dumps(
        {"devices": names[:ONLINE_LIST_LIMIT], "truncated": len(names) > ONLINE_LIST_LIMIT},
        separators=(",", ":"),
    )

"""A tenant's `$SYS` figures summed over the live nodes.

Each node writes its tenants' own figures (`publish_sys` computes them) to `{prefix}:sys:{node}`
(expiring with the node, rewritten only when they changed) and reads the live others' every
`SYS_EVERY` (`exchange`); `figures` then publishes the sums (connected clients, messages and
bytes in and out, drops, refusals, subscriptions; the online devices as a union). Usage is
metered where it happens: a publish at the node that received it, a delivery at the node that
delivered it (a forwarded message enters `Broker.route`, which does not count it as received
again), so the sums count every message once.
"""

from __future__ import annotations

import json
from typing import Any

from data_plane.cluster.bus import Bus, Peers

SYS_EVERY = 0.5  # seconds between two writes of this node's figures
# Figures summed over the nodes (the others are the same everywhere, or this node's own).
SUMMED = (
    "clients/connected",
    "messages/received",
    "messages/sent",
    "bytes/received",
    "bytes/sent",
    "messages/dropped",
    "quota/rate_limited",
    "acl/denied",
    "subscriptions/count",
)


class SysFigures:
    """This node's tenants' figures (`mine`, for the others) and the live others' (`others`)."""

    def __init__(self, bus: Bus, peers: Peers) -> None:
        self.bus = bus
        self.peers = peers  # whose figures are summed
        self.mine: dict[str, dict[str, Any]] = {}  # tenant -> our $SYS figures
        self.others: dict[str, dict[str, Any]] = {}  # node -> its figures
        self.written = ""  # our $SYS figures as last written
        self.last = float("-inf")  # monotonic time of the last exchange

    def key(self, node: str) -> str:
        return f"{self.bus.keys.prefix}:sys:{node}"

    def figures(self, tenant: str, local: dict[str, Any]) -> dict[str, Any]:
        """The tenant's `$SYS` figures over the live nodes, from this node's own (`local`, kept
        to be written for the others)."""
        self.mine[tenant] = {key: local[key] for key in SUMMED if key in local}
        self.mine[tenant]["clients/online"] = local.get("clients/online", "")
        for key, value in local.items():
            if key.startswith("quota/exceeded/"):
                self.mine[tenant][key] = value
        total = dict(local)
        devices: set[str] = set()
        truncated = False
        for theirs in self.others.values():
            figures = theirs.get(tenant)
            if not figures:
                continue
            for key, value in figures.items():
                if key == "clients/online":
                    online = json.loads(value) if value else {}
                    devices.update(online.get("devices", ()))
                    truncated = truncated or bool(online.get("truncated"))
                elif isinstance(value, int) and isinstance(total.get(key, 0), int):
                    total[key] = total.get(key, 0) + value
        if devices and local.get("clients/online"):
            online = json.loads(local["clients/online"])
            names = sorted(devices.union(online.get("devices", ())))
            limit = 1000
            total["clients/online"] = json.dumps(
                {"devices": names[:limit], "truncated": truncated or len(names) > limit},
                separators=(",", ":"),
            )
        return total

    async def exchange_every(self, now: float) -> None:
        """`exchange`, once every `SYS_EVERY` (called at each tick)."""
        if now - self.last >= SYS_EVERY:
            self.last = now
            await self.exchange()

    async def exchange(self) -> None:
        """Ours to Redis (expiring with this node), the live others' from it."""
        redis, node = self.bus.redis, self.bus.node_id
        ttl = int(self.bus.heartbeat * 1500)
        pipe = redis.pipeline(transaction=False)
        if self.mine:  # one value for all our tenants, rewritten only when it changed
            text = json.dumps(self.mine, separators=(",", ":"))
            if text != self.written:
                pipe.set(self.key(node), text, px=ttl)
                self.written = text
            else:
                pipe.pexpire(self.key(node), ttl)
        others = sorted(self.peers.alive)
        if others:
            pipe.mget([self.key(n) for n in others])
        replies = await pipe.execute()
        if self.mine and not replies[0]:  # the key was gone (Redis restarted): write it next
            self.written = ""
        found = replies[-1] if others else []
        self.others = {
            n: json.loads(value) for n, value in zip(others, found, strict=True) if value
        }

"""A tenant's rates at this node, spent without Redis: the tokens it holds of the cluster's
buckets (see `leases` for how it gets them).

A node never asks Redis per message. Each rate (publish msg/s, inbound and outbound bytes/s)
of a tenant is a `LeasedBucket` here: the tokens this node was granted, spent locally by the
admission (`ClusterRates.admit`) and by the session's outbound pacing (`LeasedBucket.spend`).
A bucket that runs low, or that refused since, asks for a top-up at the next tick; a refused
publisher waits one tick (`TICK`), by when the lease has usually come back.

This room is the leaf of the limits: no Redis, no asyncio, only the arithmetic both the broker's
hot path and the leases read.
"""

from __future__ import annotations

from dataclasses import dataclass

TICK = 0.1  # seconds between two rounds of leases (and of the count sweep, the marker)
REFRESH = 5.0  # seconds between reports of a full lease (keeps the bucket's key alive)


@dataclass(slots=True)
class LeasedBucket:
    """One rate of one tenant at this node: the tokens it holds of the cluster's bucket."""

    key: str
    rate: float
    burst: float
    target: float
    tokens: float = 0.0
    starved: bool = False  # refused since the last lease: top up at the next tick
    reported: float = float("-inf")  # monotonic time of the last lease call
    want: float = 0.0  # what the last refusal needed (a message bigger than the target)

    def needs_lease(self, now: float) -> bool:
        """Top it up at this tick: below half its target, refused since, or unreported long."""
        return self.starved or self.tokens < self.target / 2 or now - self.reported > REFRESH

    def spend(self, amount: float) -> float:
        """Outbound pacing as `rates.TokenBucket.spend`: pay while the balance is positive (it
        may go negative by one message), else wait for the next lease."""
        if self.tokens > 0:
            self.tokens -= amount
            return 0.0
        self.starved = True
        return TICK


class ClusterRates:
    """A tenant's rates at this node, as `data_plane.broker.rates.TenantRates` (the admission
    and the session call the same methods), on tokens leased from the cluster's buckets."""

    __slots__ = (
        "quota", "exceeded", "limits_inbound", "messages", "inbound", "outbound_bytes", "held_by",
    )  # fmt: skip

    def __init__(self, quota: dict[str, int], buckets: dict[str, LeasedBucket]) -> None:
        self.quota = dict(quota)
        self.exceeded = 0
        self.messages = buckets.get("messages")
        self.inbound = buckets.get("inbound")
        self.outbound_bytes = buckets.get("outbound")
        self.limits_inbound = self.messages is not None or self.inbound is not None
        self.held_by = "publish_rate"  # the quota key of the last publish that had to wait

    def admit(self, size: int) -> float:
        """0.0 to admit a publish of `size` bytes (both leases pay); else how long the publisher
        should wait (until the next lease; neither pays)."""
        messages, octets = self.messages, self.inbound
        if messages is not None and messages.tokens < 1.0 - 1e-9:
            messages.starved = True
            self.held_by = "publish_rate"
        elif octets is not None and octets.tokens < size - 1e-9:
            octets.starved = True
            octets.want = max(octets.want, float(size))
            self.held_by = "inbound_bytes_rate"
        else:
            if messages is not None:
                messages.tokens -= 1.0
            if octets is not None:
                octets.tokens -= size
            return 0.0
        self.exceeded += 1
        return TICK

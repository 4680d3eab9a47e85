"""Per-tenant rate quotas as token buckets (publish messages/s, inbound and outbound bytes/s),
shared by all of a tenant's connections on this broker process."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class TokenBucket:
    rate: float  # tokens per second; 0 disables the limit
    capacity: float
    tokens: float = 0.0
    updated: float = field(default_factory=time.monotonic)

    def __post_init__(self) -> None:
        self.tokens = self.capacity

    def take(self, amount: float = 1.0, now: float | None = None) -> float:
        """0.0 when granted; otherwise the seconds until `amount` would be available."""
        if self.rate <= 0:
            return 0.0
        now = now if now is not None else time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= amount - 1e-9:  # float refills land a hair short
            self.tokens -= amount
            return 0.0
        return (amount - self.tokens) / self.rate

    def spend(self, amount: float, now: float | None = None) -> float:
        """Pacing: 0.0 and `amount` spent (the balance may go negative, so one message larger
        than the burst still passes) while the balance is positive; otherwise the seconds until
        it is positive again."""
        if self.rate <= 0:
            return 0.0
        now = now if now is not None else time.monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens > 0:
            self.tokens -= amount
            return 0.0
        return -self.tokens / self.rate + 1e-3


class TenantRates:
    """The buckets of one tenant, rebuilt when its quota changes."""

    def __init__(self, quota: dict[str, int]) -> None:
        messages = float(quota.get("max_publish_rate") or 0)
        inbound = float(quota.get("max_inbound_bytes_rate") or 0)
        # One second of burst: short spikes pass, sustained excess does not.
        self.messages = TokenBucket(messages, max(messages, 1.0))
        self.inbound_bytes = TokenBucket(inbound, max(inbound, 1.0))
        outbound = float(quota.get("max_outbound_bytes_rate") or 0)
        # Deliveries are paced (`spend`), not refused: what waits stays in the session's queue.
        self.outbound_bytes = TokenBucket(outbound, max(outbound, 1.0)) if outbound else None
        self.quota = dict(quota)
        self.exceeded = 0
        self.limits_inbound = bool(messages or inbound)

    def admit(self, size: int) -> float:
        """0.0 to admit a publish of `size` bytes; else how long the publisher should wait."""
        now = time.monotonic()
        wait = self.messages.take(1.0, now)
        if wait:
            self.exceeded += 1
            return wait
        wait = self.inbound_bytes.take(float(size), now) if self.inbound_bytes.rate else 0.0
        if wait:
            self.messages.tokens += 1.0  # not admitted: give the message token back
            self.exceeded += 1
        return wait

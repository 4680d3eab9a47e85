"""Per-tenant rate quotas as token buckets (publish messages/s, inbound and outbound bytes/s),
shared by all of a tenant's connections on this broker process.

These run once per PUBLISH and once per delivery, so they are written flat: one clock read and
no nested calls on the way to "yes"."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

_monotonic = time.monotonic


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
        now = now if now is not None else _monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= amount - 1e-9:  # float refills land a hair short
            self.tokens -= amount
            return 0.0
        return (amount - self.tokens) / self.rate

    def available(self, now: float | None = None) -> float:
        """The tokens there are now (refilled to `now`), none taken."""
        now = now if now is not None else _monotonic()
        self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        return self.tokens

    def spend(self, amount: float) -> float:
        """Pacing: 0.0 and `amount` spent (the balance may go negative, so one message larger
        than the burst still passes) while the balance is positive; otherwise the seconds until
        it is positive again."""
        now = _monotonic()
        tokens = self.tokens + (now - self.updated) * self.rate
        if tokens > self.capacity:
            tokens = self.capacity
        self.updated = now
        if tokens > 0:
            self.tokens = tokens - amount
            return 0.0
        self.tokens = tokens
        return -tokens / self.rate + 1e-3


class TenantRates:
    """The buckets of one tenant, rebuilt when its quota changes."""

    __slots__ = (
        "message_rate", "byte_rate", "message_tokens", "message_burst", "byte_tokens",
        "byte_burst", "updated", "outbound_bytes", "quota", "exceeded", "limits_inbound",
        "held_by",
    )  # fmt: skip

    def __init__(self, quota: dict[str, int]) -> None:
        # One second of burst: short spikes pass, sustained excess does not.
        self.message_rate = float(quota.get("max_publish_rate") or 0)
        self.byte_rate = float(quota.get("max_inbound_bytes_rate") or 0)
        self.message_tokens = self.message_burst = max(self.message_rate, 1.0)
        self.byte_tokens = self.byte_burst = max(self.byte_rate, 1.0)
        self.updated = _monotonic()
        outbound = float(quota.get("max_outbound_bytes_rate") or 0)
        # Deliveries are paced (`spend`), not refused: what waits stays in the session's queue.
        self.outbound_bytes = TokenBucket(outbound, max(outbound, 1.0)) if outbound else None
        self.quota = dict(quota)
        self.exceeded = 0
        self.limits_inbound = bool(self.message_rate or self.byte_rate)
        self.held_by = "publish_rate"  # the quota key of the last publish that had to wait

    def admit(self, size: int) -> float:
        """0.0 to admit a publish of `size` bytes (both buckets pay); else how long the
        publisher should wait (neither pays)."""
        now = _monotonic()
        elapsed = now - self.updated
        self.updated = now
        messages = self.message_tokens + elapsed * self.message_rate
        if messages > self.message_burst:
            messages = self.message_burst
        octets = self.byte_tokens + elapsed * self.byte_rate
        if octets > self.byte_burst:
            octets = self.byte_burst
        wait = 0.0
        if self.message_rate and messages < 1.0 - 1e-9:  # float refills land a hair short
            wait = (1.0 - messages) / self.message_rate
            self.held_by = "publish_rate"
        elif self.byte_rate and octets < size - 1e-9:
            wait = (size - octets) / self.byte_rate
            self.held_by = "inbound_bytes_rate"
        if wait:
            self.exceeded += 1
        else:
            if self.message_rate:
                messages -= 1.0
            if self.byte_rate:
                octets -= size
        self.message_tokens = messages
        self.byte_tokens = octets
        return wait

"""A tenant's publish rate, shared fairly by its publishers on this process: over the rate, a
publisher waits its turn; it is slowed, not refused.

How a publish over the rate is handled (the admission asks `PublishShare.take`):

1. **Slowed.** The connection stops reading its client (TCP pushes back on the sender) and the
   publish waits here. The tenant's waiting publishers are served round-robin as the bucket
   refills, one publish each per round: a device that publishes within its share waits at most
   one round (a few ms) while another floods, and nothing is lost or multiplied. A device over
   the plan's optional `max_device_publish_rate` waits on its own bucket first.
2. **Refused, at last.** A client that has been over its rate without a break for `patience`
   seconds (every publish it sent in that time had to wait) has its MQTT 5 QoS 1/2 publishes
   that cannot go at once refused (0x97 with a reason) instead of waiting: it learns that it
   is over, and its own queue stops growing. MQTT 3.1.1 and QoS 0 have no refusal to give, and
   are only ever slowed. (The admission ends a connection that ignores a long run of refusals.)

The buckets are the tenant's (`rates.TenantRates` on one broker, `cluster.leased_buckets`'
`ClusterRates` in a cluster): `admit(size)` spends or tells how long until it could. This room
decides whose turn it is; it never reads or writes a socket. A waiter is told to go on with
`wake()` (the connection's read gate, which then handles the publish it held, first).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

from data_plane.broker.rates import TenantRates, TokenBucket

PATIENCE = 60.0  # seconds a client may stay over its rate before its 5.0 publishes are refused
ROUND = 0.01  # seconds: the first round when a waiter queues behind others with none scheduled


class Waiter(Protocol):
    closing: bool

    def wake(self) -> None: ...


class Held:
    """The publish waits: its waiter is woken when its turn comes. `quota`: the limit."""

    __slots__ = ("quota",)

    def __init__(self, quota: str) -> None:
        self.quota = quota


class OverTooLong(Held):
    """Over its rate for longer than `patience`: refuse this publish rather than hold it."""


# The limits a publish may wait for: quota key -> (plan key, unit), for the reason strings.
LIMITS = {
    "publish_rate": ("max_publish_rate", "messages/s for the tenant"),
    "inbound_bytes_rate": ("max_inbound_bytes_rate", "bytes/s for the tenant"),
    "device_publish_rate": ("max_device_publish_rate", "messages/s per device"),
}


def over_the_rate(quota_key: str, quota: dict[str, int], patience: float) -> str:
    """The reason string of a refusal: which limit, what it is, for how long."""
    plan_key, unit = LIMITS[quota_key]
    return (
        f"quota exceeded: publishing over the plan's {plan_key} of {quota.get(plan_key, 0):,} "
        f"{unit} for over {patience:g} s (slowed first; see the portal's quota page)"
    )


_HELD = {key: Held(key) for key in LIMITS}
_TOO_LONG = {key: OverTooLong(key) for key in _HELD}


class PublishShare:
    """One tenant's waiting publishers on this process, around the tenant's buckets."""

    __slots__ = (
        "rates", "quota", "loop", "patience", "device_rate", "devices", "waiting", "granted",
        "over_since", "device_timers", "quiet", "_timer", "_serving", "_clock",
    )  # fmt: skip

    def __init__(
        self,
        rates: Any,
        quota: dict[str, int],
        loop: asyncio.AbstractEventLoop,
        *,
        patience: float = PATIENCE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rates = rates  # None: no tenant rate, only the per-device one
        self.quota = quota
        self.loop = loop
        self.patience = patience
        self.device_rate = float(quota.get("max_device_publish_rate") or 0)
        self.devices: dict[str, TokenBucket] = {}
        # In turn order: waiter -> the size of the publish it waits to send.
        self.waiting: dict[Waiter, int] = {}
        self.granted: set[Waiter] = set()  # woken with their publish already paid for
        self.over_since: dict[Waiter, float] = {}  # waiting since, without a break
        self.device_timers: dict[Waiter, asyncio.TimerHandle] = {}
        self._timer: asyncio.TimerHandle | None = None  # the next round, while any wait
        self._serving = False  # a round is on: it sets the next one's timer itself
        self._clock = clock
        self.quiet = not self.device_rate  # nobody waits or is owed a turn: the bucket decides

    def _settle(self) -> None:
        self.quiet = not (self.waiting or self.granted or self.over_since or self.device_rate)

    def take(self, waiter: Waiter, device: str, size: int, refusable: bool) -> Held | None:
        """None: the publish goes now (paid for). Else `Held`: it waits, and `waiter.wake()`
        comes when it may go; or `OverTooLong` (only when `refusable`): refuse it instead."""
        if self.quiet:  # the publish path's usual case: one bucket call
            wait = self.rates.admit(size)
            if not wait:
                return None
            held: Held | None = self._queue(waiter, size, wait, refusable)
        else:
            held = self._take(waiter, device, size, refusable)
        self._settle()
        return held

    def _take(self, waiter: Waiter, device: str, size: int, refusable: bool) -> Held | None:
        granted = self.granted
        if granted and waiter in granted:  # its turn came: paid for when it was woken
            granted.discard(waiter)
            return None
        if self.device_rate:
            bucket = self.devices.get(device)
            if bucket is None:
                bucket = self.devices[device] = TokenBucket(self.device_rate, self.device_rate)
            if bucket.available() < 1.0 - 1e-9:
                return self._hold(waiter, "device_publish_rate", refusable, bucket)
        rates = self.rates
        wait = 0.0  # others wait already: behind them, whatever the bucket holds
        if not self.waiting or rates is None:
            wait = rates.admit(size) if rates is not None else 0.0
            if not wait:
                if self.device_rate:
                    self.devices[device].take()
                self.over_since.pop(waiter, None)  # within its rate: its run of waits ends
                return None
        held = self._queue(waiter, size, wait, refusable)
        if self.device_rate and type(held) is Held:  # the device pays now, the tenant later
            self.devices[device].take()
        return held

    def _queue(self, waiter: Waiter, size: int, wait: float, refusable: bool) -> Held:
        """Wait in line for the tenant's bucket (`wait`: until it could pay; 0: others are in
        line already), or be refused when over for too long."""
        held = self._hold(waiter, self.rates.held_by if wait else "publish_rate", refusable)
        if type(held) is OverTooLong:
            return held
        self.waiting.setdefault(waiter, size)
        if self._timer is None and not self._serving:
            self._timer = self.loop.call_later(wait or ROUND, self._serve)
        return held

    def _hold(
        self, waiter: Waiter, quota: str, refusable: bool, device: TokenBucket | None = None
    ) -> Held:
        since = self.over_since.setdefault(waiter, self._clock())
        if refusable and self._clock() - since >= self.patience:
            return _TOO_LONG[quota]
        if device is not None:  # its own bucket: its own timer
            wait = (1.0 - device.tokens) / device.rate
            self.device_timers[waiter] = self.loop.call_later(wait, self._device_ready, waiter)
        return _HELD[quota]

    def _device_ready(self, waiter: Waiter) -> None:
        self.device_timers.pop(waiter, None)
        if not waiter.closing:
            waiter.wake()

    def _serve(self) -> None:
        """The bucket has refilled: wake the waiters in turn while it pays, each once."""
        self._timer = None
        self._serving = True
        waiting, rates = self.waiting, self.rates
        try:
            while waiting:
                waiter, size = next(iter(waiting.items()))
                if waiter.closing:
                    self.leave(waiter)
                    continue
                wait = rates.admit(size)
                if wait:
                    self._timer = self.loop.call_later(wait, self._serve)
                    return
                del waiting[waiter]
                self.granted.add(waiter)
                waiter.wake()  # handles its publish; one more over the rate queues it last
        finally:
            self._serving = False
            self._settle()

    def leave(self, waiter: Waiter) -> None:
        """The waiter's connection is gone: forget it (what it held is not sent)."""
        self.waiting.pop(waiter, None)
        self.granted.discard(waiter)
        self.over_since.pop(waiter, None)
        timer = self.device_timers.pop(waiter, None)
        if timer is not None:
            timer.cancel()
        self._settle()


class Shares:
    """Each tenant's `PublishShare` on this process (and its buckets when this broker is the only
    node), rebuilt when the tenant's rates or per-device limit change."""

    def __init__(self, patience: float = PATIENCE) -> None:
        self.patience = patience
        self._shares: dict[tuple[str, float], PublishShare] = {}
        self._local_rates: dict[str, TenantRates] = {}

    def local_rates(self, tenant: str, quota: dict[str, int]) -> TenantRates:
        """The tenant's buckets on a single broker, rebuilt when its quota changed."""
        rates = self._local_rates.get(tenant)
        if rates is None or rates.quota != quota:
            rates = self._local_rates[tenant] = TenantRates(quota)
        return rates

    def share(self, tenant: str, rates: Any, quota: dict[str, int]) -> PublishShare | None:
        """The tenant's share around `rates` (its inbound buckets, None: no tenant rate), or
        None when neither the tenant nor its devices are limited."""
        device_rate = quota.get("max_device_publish_rate") or 0
        if rates is None and not device_rate:
            return None
        # Per device rate too: the rules' republish (no device rate) and the tenant's devices
        # each keep their own line, both on the tenant's one bucket.
        key = (tenant, device_rate)
        share = self._shares.get(key)
        if share is None or share.rates is not rates:
            loop = asyncio.get_running_loop()
            share = PublishShare(rates, dict(quota), loop, patience=self.patience)
            self._shares[key] = share
        return share

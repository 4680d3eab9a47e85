"""The one writer of the tenants' statistics and billable units (`stats.TenantStats`).

Every count the broker keeps per tenant, and every billable message unit (`common.charges.metering`,
AWS IoT Core's 5 KiB units, per tenant and per device), is written here and nowhere else: the
publish and delivery paths, replays' reads from history, refusals, quotas, connections, SUBSCRIBEs, back-pressure. Readers
(`$SYS`, Prometheus, the usage meter) read `stats`, a tenant -> `TenantStats` mapping; the meter
also swaps each tenant's `device_units` out per sample.

System traffic is counted apart and never billed: what a platform identity published or
received (`$events`, `$SYS`, `$rules-…`, the portal's `$portal-…`); the browser client's
`$console-…`/`$viewer-…` ids are the tenant's own traffic (`common.security.service_token`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Protocol

from common.charges.metering import CONNECT_UNITS, retained_store_units, subscribe_units
from common.security.service_token import is_platform_client
from data_plane.broker.hooks import Hooks
from data_plane.broker.message import Message
from data_plane.broker.stats import TenantStats

# The refusal counters a decision may name in its `counts` (admission, handshake).
COUNTERS = frozenset({"denied", "dropped", "rate_limited"})


class Receiver(Protocol):
    """Whom a delivery was sent to (a `Session`)."""

    @property
    def tenant(self) -> str: ...
    @property
    def client_id(self) -> str: ...
    @property
    def device(self) -> str: ...


class Sent(Protocol):
    """What was sent (a `session.Delivery`)."""

    @property
    def message(self) -> Message: ...


def platform(client_id: str) -> bool:
    """A platform identity's client id (the `$` test inline spares devices the call)."""
    return client_id[:1] == "$" and is_platform_client(client_id)


class Accounts:
    __slots__ = ("stats", "_hooks")

    def __init__(self, hooks: Hooks) -> None:
        self.stats: defaultdict[str, TenantStats] = defaultdict(TenantStats)
        self._hooks = hooks  # `quota.exceeded` / `quota.throttled` observers (metering)

    # -- the publish path (hot: no more than it must) -------------------------------------

    def received(self, message: Message) -> bool:
        """A message published in its tenant; whether it is billed (the tenant's traffic)."""
        stats = self.stats[message.tenant]
        stats.messages_received += 1
        stats.bytes_received += len(message.payload)
        if message.publisher[:1] != "$" or not is_platform_client(message.publisher):
            stats.message_units += (units := message.billable_units())
            stats.device_units[message.device] += units
            return True
        stats.system_received += 1
        stats.system_bytes_received += len(message.payload)
        return False

    def retained(self, message: Message) -> None:
        """A billed retained message stored: metered once more."""
        units = retained_store_units(message.billable_units(), len(message.payload))
        self._bill(self.stats[message.tenant], message.device, units)

    def delivered(self, receiver: Receiver, delivery: Sent, size: int) -> None:
        """A delivery written to its client (`size`: its payload): counted, billed, and told to
        the `message.delivered` hook. The session calls it directly (`Session.on_sent`): one
        call per delivery, as when the broker counted inline."""
        stats = self.stats[receiver.tenant]
        stats.messages_sent += 1
        stats.bytes_sent += size
        message = delivery.message
        publisher, client_id = message.publisher, receiver.client_id
        if (publisher[:1] == "$" and is_platform_client(publisher)) or (
            client_id[:1] == "$" and is_platform_client(client_id)
        ):
            stats.system_sent += 1
            stats.system_bytes_sent += size
        else:
            stats.message_units += (units := message.billable_units())
            stats.device_units[receiver.device] += units
        if self._hooks.has("message.delivered"):
            self._hooks.run("message.delivered", receiver, delivery)

    def read_back(self, receiver: Receiver, units: int) -> None:
        """Messages read back from the tenant's history for a replay (`replay.py`), in their
        units: billed once more, beside each one's delivery (as a retained copy stored is)."""
        if units and not platform(receiver.client_id):
            self._bill(self.stats[receiver.tenant], receiver.device, units)

    def dropped(self, tenant: str, count: int = 1) -> None:
        """Messages dropped: a full or expired queue, a refused PUBLISH, a lost forward."""
        self.stats[tenant].dropped += count

    # -- refusals and quotas -----------------------------------------------------------------

    def refused(self, tenant: str, quota: str | None, counts: tuple[str, ...] = ()) -> None:
        """What a refusal counts: the quota it exceeded (if any), then its counters."""
        if quota is not None:
            self.quota_exceeded(tenant, quota)
        if counts:
            stats = self.stats[tenant]
            for name in counts:
                if name not in COUNTERS:
                    raise ValueError(f"no refusal counter {name!r}")
                setattr(stats, name, getattr(stats, name) + 1)

    def denied(self, tenant: str, count: int = 1) -> None:
        """Topics the ACL refused (SUBSCRIBE filters, a will)."""
        self.stats[tenant].denied += count

    def quota_exceeded(self, tenant: str, key: str, *, throttled: bool = False) -> None:
        """Count a refusal (`throttled`: a slowdown, nothing refused) for the tenant's $SYS
        and let observers meter it (`quota.exceeded` / `quota.throttled`)."""
        stats = self.stats[tenant]
        counts = stats.throttled if throttled else stats.exceeded
        counts[key] = counts.get(key, 0) + 1
        self._hooks.run("quota.throttled" if throttled else "quota.exceeded", tenant, key)

    # -- connections, SUBSCRIBEs, back-pressure ------------------------------------------------

    def connected(self, tenant: str, device: str) -> None:
        """A client is in (CONNACK sent): counted, and its CONNECT billed."""
        stats = self.stats[tenant]
        stats.connected += 1
        self._bill(stats, device, CONNECT_UNITS)

    def disconnected(self, tenant: str) -> None:
        self.stats[tenant].connected -= 1

    def connections(self, tenant: str) -> int:
        return self.stats[tenant].connected

    def subscribed(self, tenant: str, device: str, filters_size: int) -> None:
        """A device's SUBSCRIBE: billed per 5 KiB of its filters."""
        self._bill(self.stats[tenant], device, subscribe_units(filters_size))

    def publisher_held(self, tenant: str) -> None:
        """A publisher paused for subscribers whose queues it backed up (`flow`)."""
        self.stats[tenant].publishers_held += 1

    def subscriber_stalled(self, tenant: str) -> None:
        """A subscriber held a publisher its whole allowance without draining (`flow`)."""
        self.stats[tenant].subscribers_stalled += 1

    @staticmethod
    def _bill(stats: TenantStats, device: str, units: int) -> None:
        stats.message_units += units
        stats.device_units[device] += units

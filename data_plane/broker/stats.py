"""What the broker counts per tenant (written by `accounting.Accounts` only), and where it may
send a client instead."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from common.mqtt.reason_codes import ReasonCode


@dataclass(frozen=True, slots=True)
class Redirect:
    """Where a client should connect instead: 0x9D Server moved when `permanent`, else 0x9C
    Use another server; 3.1.1 has no such code (CONNACK 3, Server unavailable)."""

    reference: str
    permanent: bool = False

    @property
    def reason_code(self) -> int:
        return ReasonCode.SERVER_MOVED if self.permanent else ReasonCode.USE_ANOTHER_SERVER


@dataclass
class TenantStats:
    connected: int = 0
    messages_received: int = 0
    messages_sent: int = 0
    bytes_received: int = 0
    bytes_sent: int = 0
    dropped: int = 0
    rate_limited: int = 0
    denied: int = 0
    # Of the above, the platform's own traffic, which usage metering and the tenant's figures
    # leave out: what the broker or a service identity published ($events, $SYS, `$rules-…`
    # client ids) and what was delivered to a service identity (the portal's `$portal-…`).
    system_received: int = 0
    system_bytes_received: int = 0
    system_sent: int = 0
    system_bytes_sent: int = 0
    # Billable message units (5 KiB increments, AWS IoT Core's): each PUBLISH received, each
    # delivery sent, each retained message stored, each CONNECT and SUBSCRIBE; system traffic
    # ($events, $SYS) is never billed.
    message_units: int = 0
    # The same units by device (the publishing, subscribing, connecting or receiving one; the
    # browser client and the rules by their `$` names), for per-device usage. The meter swaps
    # the dict out each sample (`data_plane.tenancy.observers`), so it holds only what is not yet metered.
    device_units: defaultdict[str, int] = field(default_factory=lambda: defaultdict(int))
    # Back-pressure: pauses of the tenant's publishers for subscribers whose queues backed up
    # (data_plane.broker.flow), and subscribers that held them a whole allowance without
    # draining (then left to drop until drained).
    publishers_held: int = 0
    subscribers_stalled: int = 0
    # quota key -> refusals (connections, message_size, publish_rate, subscriptions, retained…)
    exceeded: dict[str, int] = field(default_factory=dict)
    # quota key -> slowdowns, nothing refused (publish_rate, device_publish_rate,
    # inbound_bytes_rate: a publisher paused; outbound_rate: deliveries paced)
    throttled: dict[str, int] = field(default_factory=dict)


# Why a connection ended, in EMQX's words (the `reason` of `$events/client_disconnected`).
DISCONNECT_REASONS: dict[int, str] = {
    ReasonCode.KEEP_ALIVE_TIMEOUT: "keepalive_timeout",
    ReasonCode.SESSION_TAKEN_OVER: "takenover",
    ReasonCode.ADMINISTRATIVE_ACTION: "kicked",
    ReasonCode.NOT_AUTHORIZED: "not_authorized",
    ReasonCode.PROTOCOL_ERROR: "protocol_error",
    ReasonCode.SERVER_SHUTTING_DOWN: "server_shutting_down",
}

"""What the broker refuses, told to operators: a log line and a per-tenant counter per refusal.

The broker's connections report each refusal on the `client.refused` hook
(`data_plane.broker.refused` names the kind); `listen(broker)` records them here. Five kinds:

| kind | when | reason code |
|---|---|---|
| `auth_failed` | CONNECT refused (credentials, banned, client id, quota on connections…) | CONNACK's |
| `acl_denied` | PUBLISH, SUBSCRIBE or will outside the ACL | 0x87 |
| `quota_exceeded` | a tenant limit refused or paused something | 0x97 / 0x96 / 0x95 |
| `malformed_packet` | bytes that are not MQTT, or a protocol violation | 0x81 / 0x82 / … |
| `forced_disconnect` | the server closed a live connection (keep-alive, kicked, taken over…) | DISCONNECT's |

Counters: `mqtt_refusals_total{tenant, kind, reason_code}` on the broker's `/metrics`
(`tenant` is empty when the refused client named no existing tenant: strangers cannot grow the
label set). Log lines (logger `data_plane.refusals`, WARNING) carry `tenant`, `device`, `client_id`,
`address`, `kind`, `reason_code` and `reason`; they are rate-limited per (tenant, kind): a burst of
`BURST` lines, then at most one every `INTERVAL` seconds, the next line saying how many were
suppressed. A refusal is always counted, logged or not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any
from weakref import WeakKeyDictionary

from prometheus_client.core import CounterMetricFamily

from data_plane.broker.broker import Broker
from data_plane.broker.connection import MQTTConnection

log = logging.getLogger("data_plane.refusals")

KINDS = ("auth_failed", "acl_denied", "quota_exceeded", "malformed_packet", "forced_disconnect")
BURST = 5  # lines per (tenant, kind) before the rate limit applies
INTERVAL = 10.0  # seconds between lines per (tenant, kind) once the burst is spent
MAX_KEYS = 10_000  # (tenant, kind) log buckets kept; the oldest are forgotten beyond


class RefusalLog:
    """Counts refusals per (tenant, kind, reason code) and writes rate-limited log lines."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.counts: dict[tuple[str, str, int], int] = {}
        # (tenant, kind) -> [tokens, last refill, suppressed since the last line]
        self._buckets: dict[tuple[str, str], list[float]] = {}

    def record(
        self,
        kind: str,
        *,
        tenant: str,
        device: str,
        client_id: str,
        address: str,
        reason_code: int,
        reason: str,
    ) -> bool:
        """Count the refusal; log it unless rate-limited. Returns whether a line was written."""
        key = (tenant, kind, reason_code)
        self.counts[key] = self.counts.get(key, 0) + 1
        suppressed = self._admit((tenant, kind))
        if suppressed is None:
            return False
        fields = {
            "kind": kind,
            "tenant": tenant,
            "device": device,
            "client_id": client_id,
            "address": address,
            "reason_code": f"0x{reason_code:02x}",
            "reason": reason,
        }
        if suppressed:
            fields["suppressed"] = suppressed
        log.warning("refused: %s", kind.replace("_", " "), extra={"fields": fields})
        return True

    def _admit(self, key: tuple[str, str]) -> int | None:
        """None when this line is suppressed; else how many were suppressed before it."""
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= MAX_KEYS:
                self._buckets.pop(next(iter(self._buckets)))
            bucket = self._buckets[key] = [float(BURST), now, 0]
        tokens = min(float(BURST), bucket[0] + (now - bucket[1]) / INTERVAL)
        bucket[1] = now
        if tokens < 1.0:
            bucket[0] = tokens
            bucket[2] += 1
            return None
        bucket[0] = tokens - 1.0
        suppressed, bucket[2] = int(bucket[2]), 0
        return suppressed

    def metrics(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "mqtt_refusals",
            "Refusals by the broker: failed authentication, ACL denial, quota refusal, "
            "malformed packet, forced disconnect",
            labels=["tenant", "kind", "reason_code"],
        )
        for (tenant, kind, code), count in list(self.counts.items()):
            family.add_metric([tenant, kind, f"0x{code:02x}"], count)
        yield family


_logs: WeakKeyDictionary[Any, RefusalLog] = WeakKeyDictionary()


def log_for(broker: Broker) -> RefusalLog:
    """The broker's refusal log (one per broker object; created on first use)."""
    refusals = _logs.get(broker)
    if refusals is None:
        refusals = _logs[broker] = RefusalLog()
    return refusals


def _record(conn: MQTTConnection, kind: str, reason_code: int, reason: str, **who: str) -> None:
    log_for(conn.broker).record(
        kind,
        tenant=who.get("tenant", conn.tenant),
        device=who.get("device", conn.device),
        client_id=who.get("client_id", conn.client_id),
        address=who.get("address", conn.peer),
        reason_code=int(reason_code),
        reason=reason,
    )


def listen(broker: Broker) -> RefusalLog:
    """Record every refusal the broker's connections report (`data_plane.broker.refused`)."""
    refusals = log_for(broker)

    def refused(conn: MQTTConnection, kind: str, reason_code: int, reason: str, who: dict) -> None:
        _record(conn, kind, reason_code, reason, **who)

    broker.hooks.add("client.refused", refused)
    return refusals

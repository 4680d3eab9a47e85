"""What the broker refuses, told to operators: a log line and a per-tenant counter per refusal.

Five kinds, one function each, called from one-line hooks (`# refusal hook`) where the
connection refuses something:

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


def log_for(broker: Any) -> RefusalLog:
    """The broker's refusal log (one per broker object; created on first use)."""
    refusals = _logs.get(broker)
    if refusals is None:
        refusals = _logs[broker] = RefusalLog()
    return refusals


def _record(conn: Any, kind: str, reason_code: int, reason: str, **who: str) -> None:
    log_for(conn.broker).record(
        kind,
        tenant=who.get("tenant", conn.tenant),
        device=who.get("device", conn.device),
        client_id=who.get("client_id", conn.client_id),
        address=conn.peer,
        reason_code=int(reason_code),
        reason=reason,
    )


# -- the hooks: one function per kind --------------------------------------------------------


def auth_failed(conn: Any, connect: Any, result: Any) -> None:
    """A CONNECT refused by authentication (`result` is the AuthResult with its reason code).
    The tenant label is the result's, set only when the tenant exists."""
    username = (getattr(connect, "username", None) or "")[:256]
    _, _, device = username.partition("/")
    _record(
        conn,
        "auth_failed",
        result.reason_code,
        result.reason or "authentication failed",
        tenant=getattr(result, "tenant", "") or "",
        device=getattr(result, "device", "") or device,
        client_id=(getattr(connect, "client_id", "") or "")[:256],
    )


def connect_refused(
    conn: Any, connect: Any, tenant: str, key: str, reason_code: int = 0x97
) -> None:
    """A CONNECT from an authenticated client refused for its tenant's quota (`key`)."""
    username = getattr(connect, "username", None) or ""
    _record(
        conn,
        "quota_exceeded",
        reason_code,
        key,
        tenant=tenant,
        device=username.partition("/")[2],
        client_id=getattr(connect, "client_id", "") or "",
    )


def acl_denied(conn: Any, action: str, topic: str, reason_code: int = 0x87) -> None:
    """A PUBLISH, SUBSCRIBE or will refused by the ACL (or a client touching `$` topics)."""
    _record(conn, "acl_denied", reason_code, f"{action} {topic[:256]!r} not authorized")


def quota_exceeded(conn: Any, key: str, reason_code: int = 0x97, reason: str = "") -> None:
    """A tenant limit refused or paused something (`key`: the quota, e.g. `publish_rate`)."""
    _record(conn, "quota_exceeded", reason_code, f"{key}: {reason}" if reason else key)


def malformed_packet(conn: Any, reason_code: int, reason: str) -> None:
    """Bytes that are not a valid MQTT packet, or a protocol violation; the connection ends."""
    _record(conn, "malformed_packet", reason_code, reason)


def forced_disconnect(conn: Any, reason_code: int, reason: str = "") -> None:
    """The server ends a live connection (keep-alive timeout, kicked, taken over, shutdown…)."""
    _record(conn, "forced_disconnect", reason_code, reason or f"0x{reason_code:02x}")

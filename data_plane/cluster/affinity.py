"""Tenant-affine workers: which worker of this machine is a tenant's home.

A message never crosses tenants, so a tenant whose clients all sit on one worker never needs
the bus between workers (a forwarded message costs about twice a local one). Each tenant has a
home among the live workers of this machine that share its port (`runbroker --workers N`:
cluster members on this host with the same MQTT port that take hand-overs), chosen by
rendezvous hashing (highest random weight) of the tenant and each worker's slot: stable while
the workers stay, and a worker that leaves or joins moves only its own share of tenants. A
large tenant (`--large-tenants slug=K,…`) is homed on its K highest-weighted workers: a client
landing on one of them stays, one landing elsewhere goes to one of them chosen by its client
id (a client id always to the same worker, so that a takeover stays on one worker); only such
a tenant's messages cross workers.

A worker's slot is its index under `runbroker --workers` (`--worker-slot`), so a worker
restarted after a crash is home to the same tenants as before; while the dead one is still
counted alive (until its heartbeat lapses), the newer of two with one slot wins. Without a
slot, the node id serves.

`Affinity.home` is what the landing worker asks (`data_plane.broker.landing`), with the Unix
name of the home's hand-over socket as the answer, or None for this worker.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from data_plane.broker.handover import HandoverCounts


def weight(tenant: str, slot: str) -> int:
    """The rendezvous weight of a tenant on a worker: the same in every process."""
    digest = hashlib.blake2b(f"{tenant}\0{slot}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def homes(tenant: str, slots: list[str], k: int = 1) -> list[str]:
    """The tenant's `k` home slots among `slots`, heaviest first."""
    return sorted(slots, key=lambda slot: weight(tenant, slot), reverse=True)[: max(1, k)]


def parse_large(text: str | None) -> dict[str, int]:
    """`acme=4,big=2` → {"acme": 4, "big": 2}; a tenant without `=K` spreads over 2."""
    large: dict[str, int] = {}
    for item in (text or "").split(","):
        slug, _, k = item.strip().partition("=")
        if slug:
            large[slug] = int(k) if k else 2
            if large[slug] < 1:
                raise ValueError(f"large tenant {slug}: K must be at least 1")
    return large


class Workers(Protocol):
    """What the affinity reads of the node (`Cluster`): this worker and the live others."""

    info: dict[str, Any]
    alive: dict[str, dict[str, Any]]  # replaced (a new dict) at every beat


class Affinity:
    """This worker's view of its machine's workers, and each tenant's home among them."""

    def __init__(self, cluster: Workers, counts: HandoverCounts, large: dict[str, int]) -> None:
        self.cluster = cluster  # reads `info` (this worker) and `alive` (the others)
        self.counts = counts
        self.large = large
        self._seen: Any = None  # the `alive` the view below was built from
        self._names: dict[str, str] = {}  # slot -> its worker's hand-over name

    def workers(self) -> dict[str, str]:
        """Slot -> hand-over name of every live worker on this machine's port, this one too.
        Rebuilt when the heartbeat replaces `cluster.alive` (every half heartbeat)."""
        cluster = self.cluster
        if cluster.alive is self._seen:
            return self._names
        mine = cluster.info
        chosen: dict[str, dict[str, Any]] = {}
        for info in [mine, *cluster.alive.values()]:
            if not info.get("handover") or info.get("host") != mine.get("host"):
                continue
            if info.get("mqtt_port") != mine.get("mqtt_port"):
                continue
            slot = str(info.get("slot") or info["node"])
            held = chosen.get(slot)
            if held is None or held is not mine and info.get("started", 0) > held.get("started", 0):
                chosen[slot] = info  # two with one slot: the newer (the other died)
        self._names = {slot: info["handover"] for slot, info in chosen.items()}
        self._seen = cluster.alive
        return self._names

    def home(self, tenant: str, client_id: str) -> str | None:
        """The hand-over name of the worker `tenant`'s client belongs on; None: here."""
        names = self.workers()
        if len(names) < 2:
            return None
        own = self.cluster.info["handover"]
        k = self.large.get(tenant, 1)
        chosen = [names[slot] for slot in homes(tenant, list(names), k)]
        if own in chosen:
            return None
        if len(chosen) == 1 or not client_id:
            return chosen[0]
        pick = hashlib.blake2b(client_id.encode(), digest_size=4).digest()
        return chosen[int.from_bytes(pick, "big") % len(chosen)]

    def metrics(self) -> Iterator[Metric]:
        """`mqtt_handovers{direction}` and the workers this one sees on its machine."""
        handovers = CounterMetricFamily(
            "mqtt_handovers",
            "Client sockets handed between this machine's workers at CONNECT (tenant-affine "
            "workers): `sent` to the tenant's home, `received` from another worker, `failed` "
            "(the home did not take it: served here)",
            labels=["direction"],
        )
        counts = self.counts
        handovers.add_metric(["sent"], counts.sent)
        handovers.add_metric(["received"], counts.received)
        handovers.add_metric(["failed"], counts.failed)
        yield handovers
        workers = GaugeMetricFamily(
            "mqtt_affinity_workers", "Live workers on this machine's port that tenants are homed on"
        )
        workers.add_metric([], len(self.workers()))
        yield workers

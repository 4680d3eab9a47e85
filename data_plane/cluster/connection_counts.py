"""A tenant's max connections across the cluster, exact.

Each node's count of a tenant's connections is one field of `{prefix}:conns:{tenant}` (node →
count). A CONNECT over a tenant with `max_connections` runs `ADMIT` in Redis: the sum of the live
nodes' fields, then `HINCRBY` of ours if below the limit, in one script, so two CONNECTs at two
nodes at once are ordered by Redis and never both take the last place. A field is live while its
node's marker `{prefix}:alive:{node}` exists (refreshed every tick by `mark`, expiring after 1.5
heartbeats like the node's heartbeat): the script drops a dead node's count the first time it
meets it (the leases drop a dead node's holding by the same marker, see `leases`).

The slot is taken before the session opens and given back when the connection ends (the
`client.disconnected` hook, or the `sweep` of each tick for a connection that ended before
CONNACK). All of a node's count operations go through one queue, sent as one pipeline at a time
(`run`), so this node's field in Redis is always what the replies so far make it; after Redis
lost it (the marker was gone: restarted, or this node stalled past its TTL) the node writes its
own counts again, alone in its pipeline. Redis unreachable: a CONNECT of a limited tenant is
refused with 0x88 Server unavailable (never admitted past the limit).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from redis.exceptions import RedisError

from common.mqtt.reason_codes import ReasonCode
from data_plane.broker.connection import MQTTConnection
from data_plane.cluster.bus import Bus
from data_plane.cluster.leased_buckets import TICK

if TYPE_CHECKING:
    from data_plane.broker.broker import Broker

log = logging.getLogger("data_plane.cluster")

# KEYS[1]: the tenant's counts. ARGV: this node, the limit, the marker prefix. 1: admitted.
ADMIT = """
local counts = redis.call('HGETALL', KEYS[1])
local total = 0
for i = 1, #counts, 2 do
  local node, n = counts[i], tonumber(counts[i + 1])
  if node == ARGV[1] or redis.call('EXISTS', ARGV[3] .. node) == 1 then
    total = total + n
  else
    redis.call('HDEL', KEYS[1], node)
  end
end
if total >= tonumber(ARGV[2]) then return 0 end
redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
return 1
"""

# KEYS[1]: the tenant's counts. ARGV: this node.
RELEASE = """
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return 1
"""


@dataclass
class _Op:
    kind: str  # "admit" | "release"
    tenant: str
    limit: int = 0
    answer: asyncio.Future[bool | None] | None = None  # an admit's


class ConnectionCounts:
    """This node's field of each limited tenant's count, the slots its connections hold, and
    the marker that keeps both alive in Redis."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.counts: dict[str, int] = {}  # tenant -> our field in Redis
        self.holders: dict[Any, str] = {}  # connection -> tenant of its slot
        self.pending: set[Any] = set()  # of those, not counted (no CONNACK) yet
        self.queue: list[_Op] = []
        self.resync = True  # our count fields must be written again (Redis lost them)
        self.marker_prefix = f"{bus.keys.prefix}:alive:"
        self.marker = self.marker_prefix + bus.node_id
        self.marked = float("-inf")  # monotonic time our marker was last set from
        self.admit_script = bus.redis.register_script(ADMIT)
        self.release_script = bus.redis.register_script(RELEASE)
        self.wake = asyncio.Event()

    def key(self, tenant: str) -> str:
        return f"{self.bus.keys.prefix}:conns:{tenant}"

    def attach(self, broker: Broker) -> None:
        """A connection that was counted gives its slot back as it goes (takeover included)."""
        broker.hooks.add("client.disconnected", self.release)
        broker.hooks.add("client.connected", self.pending.discard)  # the hook releases it now

    async def mark(self) -> None:
        """Our marker, whose absence tells us Redis lost our counts (restart, or we stalled
        past its TTL and the others dropped them)."""
        sent = time.monotonic()
        was = await self.bus.redis.set(self.marker, 1, px=int(self.bus.heartbeat * 1500), get=True)
        self.marked = sent
        if was is None:
            self.resync = True
        if self.resync:
            self.wake.set()

    async def admit(self, conn: MQTTConnection, tenant: str, limit: int) -> int:
        """0 when `conn` may come in under the tenant's `limit` across the cluster (its slot is
        taken until it ends), else the CONNACK reason code (0x97, or 0x88: no bus)."""
        if time.monotonic() - self.marked > self.bus.heartbeat:
            # Our marker may have expired (no tick got through for a while): the others may
            # have dropped our count, so nothing can be admitted exactly.
            return ReasonCode.SERVER_UNAVAILABLE
        answer = asyncio.get_running_loop().create_future()
        self._queue(_Op("admit", tenant, limit, answer))
        admitted = await answer
        if admitted is None:
            return ReasonCode.SERVER_UNAVAILABLE
        if not admitted:
            return ReasonCode.QUOTA_EXCEEDED
        self.holders[conn] = tenant
        self.pending.add(conn)
        return 0

    def release(self, conn: MQTTConnection) -> None:
        """`conn`'s slot, if it holds one, goes back."""
        self.pending.discard(conn)
        tenant = self.holders.pop(conn, None)
        if tenant is not None:
            self._queue(_Op("release", tenant))

    def sweep(self) -> None:
        """Slots of connections that ended before they were counted (refused after admission,
        gone during CONNECT) go back here; a counted one gives its back by the hook."""
        for conn in [conn for conn in self.pending if conn.closing]:
            self.release(conn)

    def _queue(self, op: _Op) -> None:
        self.queue.append(op)
        self.wake.set()

    async def run(self) -> None:
        """The one sender of this node's count operations: a pipeline at a time, in order."""
        while True:
            await self.wake.wait()
            self.wake.clear()
            if self.resync:
                try:
                    await self._write_counts()
                except (RedisError, OSError) as exc:
                    log.debug("connection counts not written (%s)", exc)
                    await asyncio.sleep(TICK)
            ops, self.queue = self.queue, []
            if not ops:
                continue
            try:
                await self._send(ops)
            except Exception:  # never leave a CONNECT waiting, nor stop counting
                log.exception("connection counts: %d operations failed", len(ops))
                self.resync = True
                for op in ops:
                    if op.answer is not None and not op.answer.done():
                        op.answer.set_result(None)

    async def _send(self, ops: list[_Op]) -> None:
        node = self.bus.node_id
        pipe = self.bus.redis.pipeline(transaction=False)
        for op in ops:
            key = self.key(op.tenant)
            if op.kind == "admit":
                args = [node, op.limit, self.marker_prefix]
                await self.admit_script(keys=[key], args=args, client=pipe)  # queued
            else:  # counted now: the snapshot a rewrite takes must not count it again
                self.counts[op.tenant] = self.counts.get(op.tenant, 0) - 1
                await self.release_script(keys=[key], args=[node], client=pipe)
        try:
            replies = await pipe.execute(raise_on_error=False)
        except (RedisError, OSError) as exc:
            replies = [exc] * len(ops)
        for op, reply in zip(ops, replies, strict=True):
            failed = isinstance(reply, Exception)
            if op.kind == "admit":
                if not failed and reply == 1:
                    self.counts[op.tenant] = self.counts.get(op.tenant, 0) + 1
                if not op.answer.done():  # type: ignore[union-attr]  # an admit has its answer
                    op.answer.set_result(None if failed else reply == 1)  # type: ignore[union-attr]  # (as above)
            elif failed:  # Redis may not have it: write our counts as they are
                self.resync = True
            elif self.counts.get(op.tenant, 1) <= 0:
                del self.counts[op.tenant]
        if self.resync:
            self.wake.set()

    async def _write_counts(self) -> None:
        """Our count of every tenant, as the replies so far make it (nothing else in flight)."""
        node = self.bus.node_id
        pipe = self.bus.redis.pipeline(transaction=False)
        for tenant, count in self.counts.items():
            if count > 0:
                pipe.hset(self.key(tenant), node, count)
            else:
                pipe.hdel(self.key(tenant), node)
        await pipe.execute()
        self.resync = False
        self.counts = {tenant: count for tenant, count in self.counts.items() if count > 0}
        if self.counts:
            log.info("wrote this node's connection counts of %d tenants", len(self.counts))

    def leave(self, pipe: Any) -> None:
        """Into the leaving node's pipeline: its counts go now, not with its marker."""
        for tenant in self.counts:
            pipe.hdel(self.key(tenant), self.bus.node_id)

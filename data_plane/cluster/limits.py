"""A tenant's limits across the cluster (issue 17, point 4): connections counted exactly, rates
shared through leases, `$SYS` figures summed over the nodes.

Max connections, exact. Each node's count of a tenant's connections is one field of
`{prefix}:conns:{tenant}` (node → count). A CONNECT over a tenant with `max_connections` runs
`ADMIT` in Redis: the sum of the live nodes' fields, then `HINCRBY` of ours if below the limit,
in one script, so two CONNECTs at two nodes at once are ordered by Redis and never both take the
last place. A field is live while its node's marker `{prefix}:alive:{node}` exists (refreshed
every `TICK`, expiring after 1.5 heartbeats like the node's heartbeat): the script drops a dead
node's count the first time it meets it. The slot is taken before the session opens and given
back when the connection ends (the `client.disconnected` hook, or the sweep of each tick for a
connection that ended before CONNACK). All of a node's count operations go through one queue,
sent as one pipeline at a time, so this node's field in Redis is always what the replies so far
make it; after Redis lost it (the marker was gone: restarted, or this node stalled past its TTL)
the node writes its own counts again, alone in its pipeline. Redis unreachable: a CONNECT of a
limited tenant is refused with 0x88 Server unavailable (never admitted past the limit).

Rates within the limit. Every rate (publish msg/s, inbound and outbound bytes/s) is one token
bucket per tenant in Redis (`{prefix}:bucket:{tenant}:{kind}`: tokens, last refill, and what
each node holds), refilled by Redis' own clock. A node never asks Redis per message: it holds a
lease of tokens (`LEASE_AHEAD` seconds of the rate, more for a message bigger than that) and
spends it locally; every `TICK` the buckets whose lease is below half (or that refused since)
are topped up in one script call for all of them. The bucket's refill is capped so that its
tokens plus what every live node holds never exceed the burst (one second of the rate, as on one
broker), hence the bound, the same as one broker's:

    admitted in any window of T seconds ≤ rate × T + burst
        (+ one message per node, outbound; + once, what a node new to the tenant spends of its
        first credit — `LEASE_AHEAD` of the rate over the live nodes — before its first lease
        reports it)

Under sustained excess the buckets are drained each tick and the nodes spend all they lease, so
the cluster admits the rate itself; what a window of T seconds can differ from rate × T by is
what the nodes hold at its two ends (≤ the burst, in practice a tick's worth). A burst from idle
at one node: `LEASE_AHEAD` of the rate at once, the rest of the burst over the next ticks (one
broker would admit the whole burst at once). A dead node's lease is dropped with its marker.
Redis unreachable: each node refills locally at rate / (live nodes), so the sum stays within.

`$SYS`: each node writes its tenants' own figures (`publish_sys` computes them) to
`{prefix}:sys:{node}` (expiring with the node), and publishes the sums over the live nodes
(connected clients, messages and bytes in and out, drops, refusals, subscriptions; the online
devices as a union). Usage is metered where it happens: a publish at the node that received it,
a delivery at the node that delivered it (a forwarded message enters `Broker.route`, which does
not count it as received again), so the sums count every message once.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from redis.exceptions import RedisError

from common.mqtt.reason_codes import ReasonCode

log = logging.getLogger("data_plane.cluster")

TICK = 0.1  # seconds between two rounds of leases (and of the count sweep, the marker)
LEASE_AHEAD = 0.25  # seconds of its rate a node holds for a tenant
REFRESH = 5.0  # seconds between reports of a full lease (keeps the bucket's key alive)
BUCKET_TTL = 60_000  # ms a bucket nobody touches stays in Redis
SYS_EVERY = 0.5  # seconds between two writes of this node's figures
RATE_KINDS = (
    ("messages", "max_publish_rate"),
    ("inbound", "max_inbound_bytes_rate"),
    ("outbound", "max_outbound_bytes_rate"),
)
# Figures summed over the nodes (the others are the same everywhere, or this node's own).
SUMMED = (
    "clients/connected",
    "messages/received",
    "messages/sent",
    "bytes/received",
    "bytes/sent",
    "messages/dropped",
    "quota/rate_limited",
    "acl/denied",
    "subscriptions/count",
)

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

# KEYS: buckets. ARGV: this node, the marker prefix, then per bucket: rate, burst, held, want.
# Returns each grant (negative: tokens given back) as a string (Lua numbers become integers).
LEASE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + tonumber(clock[2]) / 1000
local node, marker = ARGV[1], ARGV[2]
local grants = {}
for i, key in ipairs(KEYS) do
  local base = 2 + (i - 1) * 4
  local rate, burst = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
  local held, want = tonumber(ARGV[base + 3]), tonumber(ARGV[base + 4])
  local fields = redis.call('HGETALL', key)
  local tokens, ts, others = nil, now, 0
  for j = 1, #fields, 2 do
    local f, v = fields[j], fields[j + 1]
    if f == 't' then tokens = tonumber(v)
    elseif f == 'ts' then ts = tonumber(v)
    elseif string.sub(f, 1, 2) == 'h:' and string.sub(f, 3) ~= node then
      if redis.call('EXISTS', marker .. string.sub(f, 3)) == 1 then
        others = others + tonumber(v)
      else
        redis.call('HDEL', key, f)
      end
    end
  end
  local cap = burst - others - held
  if cap < 0 then cap = 0 end
  if tokens == nil then tokens = cap else tokens = math.min(cap, tokens + (now - ts) * rate / 1000) end
  local grant = want - held
  if grant > tokens then grant = tokens end
  if grant < -held then grant = -held end
  tokens = tokens - grant
  redis.call('HSET', key, 't', tostring(tokens), 'ts', tostring(now), 'h:' .. node,
    tostring(held + grant))
  redis.call('PEXPIRE', key, tonumber(ARGV[#ARGV]))
  grants[i] = tostring(grant)
end
return grants
"""


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

    __slots__ = ("quota", "exceeded", "limits_inbound", "messages", "inbound", "outbound_bytes")

    def __init__(self, quota: dict[str, int], buckets: dict[str, LeasedBucket]) -> None:
        self.quota = dict(quota)
        self.exceeded = 0
        self.messages = buckets.get("messages")
        self.inbound = buckets.get("inbound")
        self.outbound_bytes = buckets.get("outbound")
        self.limits_inbound = self.messages is not None or self.inbound is not None

    def admit(self, size: int) -> float:
        """0.0 to admit a publish of `size` bytes (both leases pay); else how long the publisher
        should wait (until the next lease; neither pays)."""
        messages, octets = self.messages, self.inbound
        if messages is not None and messages.tokens < 1.0 - 1e-9:
            messages.starved = True
        elif octets is not None and octets.tokens < size - 1e-9:
            octets.starved = True
            octets.want = max(octets.want, float(size))
        else:
            if messages is not None:
                messages.tokens -= 1.0
            if octets is not None:
                octets.tokens -= size
            return 0.0
        self.exceeded += 1
        return TICK


@dataclass
class _Op:
    kind: str  # "admit" | "release"
    tenant: str
    limit: int = 0
    answer: asyncio.Future | None = None


@dataclass
class ClusterLimits:
    cluster: Any
    counts: dict[str, int] = field(default_factory=dict)  # tenant -> our field in Redis
    holders: dict[Any, str] = field(default_factory=dict)  # connection -> tenant of its slot
    pending: set[Any] = field(default_factory=set)  # of those, not counted (no CONNACK) yet
    queue: list[_Op] = field(default_factory=list)
    resync: bool = True  # our count fields must be written again (Redis lost them)
    buckets: dict[str, LeasedBucket] = field(default_factory=dict)  # key -> bucket
    rates: dict[str, ClusterRates] = field(default_factory=dict)  # tenant -> its rates
    mine: dict[str, dict[str, Any]] = field(default_factory=dict)  # tenant -> our $SYS figures
    others: dict[str, dict[str, Any]] = field(default_factory=dict)  # node -> its figures
    tasks: list[asyncio.Task] = field(default_factory=list)
    leases = 0  # lease script calls (for /metrics)
    local_refills = 0  # ticks the bus did not answer and buckets refilled locally

    def __post_init__(self) -> None:
        cluster = self.cluster
        prefix = cluster.keys.prefix
        self.marker_prefix = f"{prefix}:alive:"
        self.marker = self.marker_prefix + cluster.node_id
        self.sys_key = f"{prefix}:sys:"
        self.admit_script = cluster.redis.register_script(ADMIT)
        self.release_script = cluster.redis.register_script(RELEASE)
        self.lease_script = cluster.redis.register_script(LEASE)
        self.wake = asyncio.Event()
        self.leasing = asyncio.Lock()
        self.last_tick = time.monotonic()
        self.last_sys = float("-inf")
        self.marked = float("-inf")  # monotonic time our marker was last set from
        self.written = ""  # our $SYS figures as last written

    def conns_key(self, tenant: str) -> str:
        return f"{self.cluster.keys.prefix}:conns:{tenant}"

    # -- life -----------------------------------------------------------------------------

    async def start(self, broker: Any) -> None:
        # A connection that was counted gives its slot back as it goes (takeover included).
        broker.hooks.add("client.disconnected", self.release)
        broker.hooks.add("client.connected", self.pending.discard)  # the hook releases it now
        broker.metric_sources.append(self.metrics)
        try:  # our marker before any count of ours: else another node's ADMIT drops our field
            await self._mark()
        except (RedisError, OSError) as exc:
            log.warning("limits: bus not reachable yet (%s)", exc)
        loop = asyncio.get_running_loop()
        self.tasks += [loop.create_task(self._tick_forever()), loop.create_task(self._counts())]

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        try:  # leave: our counts and leases need not wait for the marker to expire
            pipe = self.cluster.redis.pipeline(transaction=False)
            pipe.delete(self.marker, self.sys_key + self.cluster.node_id)
            for tenant in self.counts:
                pipe.hdel(self.conns_key(tenant), self.cluster.node_id)
            for key in self.buckets:
                pipe.hdel(key, "h:" + self.cluster.node_id)
            await pipe.execute()
        except (RedisError, OSError) as exc:
            log.warning("limits not released cleanly: %s", exc)

    # -- connections ------------------------------------------------------------------------

    async def admit(self, conn: Any, tenant: str, limit: int) -> int:
        """0 when `conn` may come in under the tenant's `limit` across the cluster (its slot is
        taken until it ends), else the CONNACK reason code (0x97, or 0x88: no bus)."""
        if time.monotonic() - self.marked > self.cluster.heartbeat:
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

    def release(self, conn: Any) -> None:
        self.pending.discard(conn)
        tenant = self.holders.pop(conn, None)
        if tenant is not None:
            self._queue(_Op("release", tenant))

    def _queue(self, op: _Op) -> None:
        self.queue.append(op)
        self.wake.set()

    async def _counts(self) -> None:
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
        node = self.cluster.node_id
        pipe = self.cluster.redis.pipeline(transaction=False)
        for op in ops:
            key = self.conns_key(op.tenant)
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
                if not op.answer.done():
                    op.answer.set_result(None if failed else reply == 1)
            elif failed:  # Redis may not have it: write our counts as they are
                self.resync = True
            elif self.counts.get(op.tenant, 1) <= 0:
                del self.counts[op.tenant]
        if self.resync:
            self.wake.set()

    async def _write_counts(self) -> None:
        """Our count of every tenant, as the replies so far make it (nothing else in flight)."""
        node = self.cluster.node_id
        pipe = self.cluster.redis.pipeline(transaction=False)
        for tenant, count in self.counts.items():
            if count > 0:
                pipe.hset(self.conns_key(tenant), node, count)
            else:
                pipe.hdel(self.conns_key(tenant), node)
        await pipe.execute()
        self.resync = False
        self.counts = {tenant: count for tenant, count in self.counts.items() if count > 0}
        if self.counts:
            log.info("wrote this node's connection counts of %d tenants", len(self.counts))

    # -- rates ------------------------------------------------------------------------------

    def rates_for(self, tenant: str, quota: dict[str, int]) -> ClusterRates:
        """The tenant's leased buckets (as `Broker.rates_for`), rebuilt when its quota changed
        (the tokens held are kept: the next lease reports them)."""
        rates = self.rates.get(tenant)
        if rates is not None and rates.quota == quota:
            return rates
        buckets: dict[str, LeasedBucket] = {}
        for kind, quota_key in RATE_KINDS:
            rate = float(quota.get(quota_key) or 0)
            if not rate:
                continue
            key = f"{self.cluster.keys.prefix}:bucket:{tenant}:{kind}"
            burst = max(rate, 1.0)  # one second of burst, as one broker's buckets
            target = min(burst, max(rate * LEASE_AHEAD, 1.0))
            old = self.buckets.get(key)
            # A tenant new here starts with its share of a lease, on credit (reported as held
            # by the first lease, right below): its first publish need not wait for a tick.
            credit = target / (1 + len(self.cluster.alive))
            bucket = LeasedBucket(key, rate, burst, target, old.tokens if old else credit)
            self.buckets[key] = buckets[kind] = bucket
        for kind, _ in RATE_KINDS:  # a rate no longer limited: its lease goes back
            key = f"{self.cluster.keys.prefix}:bucket:{tenant}:{kind}"
            if kind not in buckets and key in self.buckets:
                self.buckets[key].target = 0.0
        rates = self.rates[tenant] = ClusterRates(quota, buckets)
        self._lease_soon(list(buckets.values()))
        return rates

    def _lease_soon(self, buckets: list[LeasedBucket]) -> None:
        async def lease() -> None:
            try:
                await self._lease(buckets, time.monotonic())
            except (RedisError, OSError) as exc:
                log.debug("first lease failed (%s): next tick", exc)

        if buckets:
            task = asyncio.get_running_loop().create_task(lease())
            self.tasks.append(task)
            task.add_done_callback(self.tasks.remove)

    async def _lease(self, buckets: list[LeasedBucket], now: float) -> None:
        # One call at a time: two calls out at once would both report the same holding and
        # both be granted up to the target (Redis would then undercount what we hold).
        async with self.leasing:
            await self._lease_locked(buckets, now)

    async def _lease_locked(self, buckets: list[LeasedBucket], now: float) -> None:
        args: list[Any] = [self.cluster.node_id, self.marker_prefix]
        for bucket in buckets:
            held = max(bucket.tokens, 0.0)
            want = min(bucket.burst, max(bucket.target, bucket.want))
            args += [bucket.rate, bucket.burst, held, want]
        args.append(BUCKET_TTL)
        grants = await self.lease_script(keys=[b.key for b in buckets], args=args)
        self.leases += 1
        for bucket, grant in zip(buckets, grants, strict=True):
            # What was spent while the call was out is already off `tokens`: add the grant.
            bucket.tokens += float(grant)
            bucket.starved = False
            bucket.want = 0.0
            bucket.reported = now

    def _refill_locally(self, elapsed: float) -> None:
        """The bus does not answer: each node takes rate / (live nodes), as long as it lasts."""
        share = 1 + len(self.cluster.alive)
        for bucket in self.buckets.values():
            cap = bucket.burst / share
            if bucket.tokens < cap:
                bucket.tokens = min(cap, bucket.tokens + elapsed * bucket.rate / share)
        self.local_refills += 1

    # -- $SYS -------------------------------------------------------------------------------

    def figures(self, tenant: str, local: dict[str, Any]) -> dict[str, Any]:
        """The tenant's `$SYS` figures over the live nodes, from this node's own (`local`, kept
        to be written for the others)."""
        self.mine[tenant] = {key: local[key] for key in SUMMED if key in local}
        self.mine[tenant]["clients/online"] = local.get("clients/online", "")
        for key, value in local.items():
            if key.startswith("quota/exceeded/"):
                self.mine[tenant][key] = value
        total = dict(local)
        devices: set[str] = set()
        truncated = False
        for theirs in self.others.values():
            figures = theirs.get(tenant)
            if not figures:
                continue
            for key, value in figures.items():
                if key == "clients/online":
                    online = json.loads(value) if value else {}
                    devices.update(online.get("devices", ()))
                    truncated = truncated or bool(online.get("truncated"))
                elif isinstance(value, int) and isinstance(total.get(key, 0), int):
                    total[key] = total.get(key, 0) + value
        if devices and local.get("clients/online"):
            online = json.loads(local["clients/online"])
            names = sorted(devices.union(online.get("devices", ())))
            limit = 1000
            total["clients/online"] = json.dumps(
                {"devices": names[:limit], "truncated": truncated or len(names) > limit},
                separators=(",", ":"),
            )
        return total

    async def _exchange_figures(self) -> None:
        """Ours to Redis (expiring with this node), the live others' from it."""
        redis, node = self.cluster.redis, self.cluster.node_id
        ttl = int(self.cluster.heartbeat * 1500)
        pipe = redis.pipeline(transaction=False)
        if self.mine:  # one value for all our tenants, rewritten only when it changed
            text = json.dumps(self.mine, separators=(",", ":"))
            if text != self.written:
                pipe.set(self.sys_key + node, text, px=ttl)
                self.written = text
            else:
                pipe.pexpire(self.sys_key + node, ttl)
        others = sorted(self.cluster.alive)
        if others:
            pipe.mget([self.sys_key + n for n in others])
        replies = await pipe.execute()
        if self.mine and not replies[0]:  # the key was gone (Redis restarted): write it next
            self.written = ""
        found = replies[-1] if others else []
        self.others = {
            n: json.loads(value) for n, value in zip(others, found, strict=True) if value
        }

    # -- /metrics ---------------------------------------------------------------------------

    def metrics(self) -> Iterator[Any]:
        held = GaugeMetricFamily(
            "mqtt_cluster_connection_places",
            "Places of tenants' max_connections this node holds in the cluster's counts",
        )
        held.add_metric([], sum(self.counts.values()))
        leases = CounterMetricFamily(
            "mqtt_cluster_rate_leases", "Lease calls topping up this node's rate tokens"
        )
        leases.add_metric([], self.leases)
        local = CounterMetricFamily(
            "mqtt_cluster_rate_local_refills",
            "Ticks Redis did not answer and the rate tokens were refilled locally (rate / nodes)",
        )
        local.add_metric([], self.local_refills)
        yield from (held, leases, local)

    # -- every tick -------------------------------------------------------------------------

    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            try:
                await self._tick()
            except (RedisError, OSError) as exc:
                log.debug("limits tick failed (%s): refilling locally", exc)
                now = time.monotonic()
                self._refill_locally(now - self.last_tick)
                self.last_tick = now
            except Exception:  # a bug must not stop the marker, the sweep, the leases
                log.exception("limits tick failed")

    async def _mark(self) -> None:
        """Our marker, whose absence tells us Redis lost our counts (restart, or we stalled
        past its TTL and the others dropped them)."""
        sent = time.monotonic()
        was = await self.cluster.redis.set(
            self.marker, 1, px=int(self.cluster.heartbeat * 1500), get=True
        )
        self.marked = sent
        if was is None:
            self.resync = True
        if self.resync:
            self.wake.set()

    async def _tick(self) -> None:
        now = time.monotonic()
        await self._mark()
        self._sweep(self.pending)
        due = [bucket for bucket in self.buckets.values() if bucket.needs_lease(now)]
        if due:
            await self._lease(due, now)
        self.last_tick = now
        if now - self.last_sys >= SYS_EVERY:
            self.last_sys = now
            await self._exchange_figures()

    def _sweep(self, pending: Iterable[Any]) -> None:
        """Slots of connections that ended before they were counted (refused after admission,
        gone during CONNECT) go back here; a counted one gives its back by the hook."""
        for conn in [conn for conn in pending if conn.closing]:
            self.release(conn)

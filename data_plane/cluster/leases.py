"""A tenant's rates across the cluster: token buckets in Redis that the nodes lease from.

Every rate (publish msg/s, inbound and outbound bytes/s) is one token bucket per tenant in Redis
(`{prefix}:bucket:{tenant}:{kind}`: tokens, last refill, and what each node holds), refilled by
Redis' own clock. A node holds a lease of tokens (`LEASE_AHEAD` seconds of the rate, more for a
message bigger than that) and spends it locally (`leased_buckets`); every tick the buckets whose
lease is below half (or that refused since) are topped up in one script call for all of them
(`LEASE`). The bucket's refill is capped so that its tokens plus what every live node holds
never exceed the burst (one second of the rate, as on one broker), hence the bound, the same as
one broker's:

    admitted in any window of T seconds ≤ rate × T + burst
        (+ one message per node, outbound; + once, what a node new to the tenant spends of its
        first credit — `LEASE_AHEAD` of the rate over the live nodes — before its first lease
        reports it)

Under sustained excess the buckets are drained each tick and the nodes spend all they lease, so
the cluster admits the rate itself; what a window of T seconds can differ from rate × T by is
what the nodes hold at its two ends (≤ the burst, in practice a tick's worth). A burst from idle
at one node: `LEASE_AHEAD` of the rate at once, the rest of the burst over the next ticks (one
broker would admit the whole burst at once). A dead node's lease is dropped with its marker
(`connection_counts` keeps this node's). Redis unreachable: each node refills locally at
rate / (live nodes), so the sum stays within.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from redis.exceptions import RedisError

from data_plane.cluster.bus import Bus, Peers
from data_plane.cluster.leased_buckets import ClusterRates, LeasedBucket

log = logging.getLogger("data_plane.cluster")

LEASE_AHEAD = 0.25  # seconds of its rate a node holds for a tenant
BUCKET_TTL = 60_000  # ms a bucket nobody touches stays in Redis
RATE_KINDS = (
    ("messages", "max_publish_rate"),
    ("inbound", "max_inbound_bytes_rate"),
    ("outbound", "max_outbound_bytes_rate"),
)

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


class RateLeases:
    """This node's leases of the tenants' buckets: built per tenant (`rates_for`), topped up at
    each tick (`top_up`), refilled locally while Redis does not answer (`refill_locally`)."""

    def __init__(self, bus: Bus, peers: Peers, marker_prefix: str) -> None:
        self.bus = bus
        self.peers = peers  # a node's share of a rate is 1 / the live nodes
        self.marker_prefix = marker_prefix  # a node's lease is live while its marker is
        self.lease_script = bus.redis.register_script(LEASE)
        self.buckets: dict[str, LeasedBucket] = {}  # key -> bucket
        self.rates: dict[str, ClusterRates] = {}  # tenant -> its rates
        self.tasks: list[asyncio.Task[None]] = []  # first leases in flight
        self.leasing = asyncio.Lock()
        self.leases = 0  # lease script calls (for /metrics)
        self.local_refills = 0  # ticks the bus did not answer and buckets refilled locally

    def key(self, tenant: str, kind: str) -> str:
        return f"{self.bus.keys.prefix}:bucket:{tenant}:{kind}"

    def rates_for(self, tenant: str, quota: dict[str, int]) -> ClusterRates:
        """The tenant's leased buckets (as `Shares.local_rates`), rebuilt when its quota changed
        (the tokens held are kept: the next lease reports them)."""
        rates = self.rates.get(tenant)
        if rates is not None and rates.quota == quota:
            return rates
        buckets: dict[str, LeasedBucket] = {}
        for kind, quota_key in RATE_KINDS:
            rate = float(quota.get(quota_key) or 0)
            if not rate:
                continue
            key = self.key(tenant, kind)
            burst = max(rate, 1.0)  # one second of burst, as one broker's buckets
            target = min(burst, max(rate * LEASE_AHEAD, 1.0))
            old = self.buckets.get(key)
            # A tenant new here starts with its share of a lease, on credit (reported as held
            # by the first lease, right below): its first publish need not wait for a tick.
            credit = target / (1 + len(self.peers.alive))
            bucket = LeasedBucket(key, rate, burst, target, old.tokens if old else credit)
            self.buckets[key] = buckets[kind] = bucket
        for kind, _ in RATE_KINDS:  # a rate no longer limited: its lease goes back
            key = self.key(tenant, kind)
            if kind not in buckets and key in self.buckets:
                self.buckets[key].target = 0.0
        rates = self.rates[tenant] = ClusterRates(quota, buckets)
        self._lease_soon(list(buckets.values()))
        return rates

    def _lease_soon(self, buckets: list[LeasedBucket]) -> None:
        async def lease() -> None:
            try:
                await self.lease(buckets, time.monotonic())
            except (RedisError, OSError) as exc:
                log.debug("first lease failed (%s): next tick", exc)

        if buckets:
            task = asyncio.get_running_loop().create_task(lease())
            self.tasks.append(task)
            task.add_done_callback(self.tasks.remove)

    async def top_up(self, now: float) -> None:
        """The buckets due a lease at this tick, in one script call."""
        due = [bucket for bucket in self.buckets.values() if bucket.needs_lease(now)]
        if due:
            await self.lease(due, now)

    async def lease(self, buckets: list[LeasedBucket], now: float) -> None:
        """Report what this node holds of `buckets` and take the grants (one call for all)."""
        # One call at a time: two calls out at once would both report the same holding and
        # both be granted up to the target (Redis would then undercount what we hold).
        async with self.leasing:
            await self._lease_locked(buckets, now)

    async def _lease_locked(self, buckets: list[LeasedBucket], now: float) -> None:
        args: list[Any] = [self.bus.node_id, self.marker_prefix]
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

    def refill_locally(self, elapsed: float) -> None:
        """The bus does not answer: each node takes rate / (live nodes), as long as it lasts."""
        share = 1 + len(self.peers.alive)
        for bucket in self.buckets.values():
            cap = bucket.burst / share
            if bucket.tokens < cap:
                bucket.tokens = min(cap, bucket.tokens + elapsed * bucket.rate / share)
        self.local_refills += 1

    def leave(self, pipe: Any) -> None:
        """Into the leaving node's pipeline: what it holds of every bucket goes back now."""
        for key in self.buckets:
            pipe.hdel(key, "h:" + self.bus.node_id)

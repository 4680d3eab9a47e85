"""Seats of the live view: how many `/ws/live/` sockets a member and a tenant hold, bounded.

Counted in this web process, always; and, where a Redis is configured, across every web process
on it: a seat there is an entry of two sorted sets (the tenant's and the member's) scored with
its expiry, which its process pushes forward every few seconds, so the seats of a process that
died without giving them back lapse by themselves (`SEAT_TTL`). One Lua script checks both bounds
and takes the seat in one step, so two processes cannot both take the last one. If Redis does not
answer, the bounds of this process still hold and the live view goes on (a warning is logged):
a Redis outage must not close every tenant's live pages.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

log = logging.getLogger(__name__)

SEAT_TTL = 30.0  # seconds a seat outlives the last sign of its process
KEEP_ALIVE = SEAT_TTL / 3

_TAKE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[4]) then return 'member' end
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 'tenant' end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[5])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
return 'ok'
"""


@dataclass(frozen=True)
class Bounds:
    per_member: int
    per_tenant: int


@dataclass(frozen=True)
class Seat:
    tenant: str
    member: str
    id: str
    shared: bool  # also held in Redis


@dataclass(frozen=True)
class Refused:
    limit: str  # "member" or "tenant": the bound reached (a metric label, a fixed set)
    words: str  # what the page shows


def tenant_key(tenant: str) -> str:
    return f"live:{{{tenant}}}:seats"  # {tenant}: one hash slot per tenant on a Redis Cluster


def member_key(tenant: str, member: str) -> str:
    return f"live:{{{tenant}}}:member:{member}"


def refusal(limit: str, tenant: str, bounds: Bounds) -> Refused:
    if limit == "member":
        words = (
            f"Live updates are off on this page: you have {bounds.per_member} live pages of "
            f"{tenant} open, the most one member may. Close one and reload."
        )
    else:
        words = (
            f"Live updates are off on this page: {tenant} has {bounds.per_tenant} live pages "
            f"open, the most a tenant may. Close one and reload."
        )
    return Refused(limit, words)


class Seats:
    def __init__(self, bounds: Bounds, redis: Any = None) -> None:
        self.bounds = bounds
        self._redis = redis  # a redis.asyncio client, or None: this process only
        self._take = redis.register_script(_TAKE) if redis is not None else None
        self._tenants: Counter[str] = Counter()
        self._members: Counter[tuple[str, str]] = Counter()
        self._shared: dict[str, Seat] = {}  # held in Redis, kept alive from here
        self._ids = itertools.count()
        self._process = secrets.token_hex(6)
        self._keeper: asyncio.Task | None = None
        self._redis_failing = False

    async def take(self, tenant: str, member: str) -> Seat | Refused:
        if self._members[tenant, member] >= self.bounds.per_member:
            return refusal("member", tenant, self.bounds)
        if self._tenants[tenant] >= self.bounds.per_tenant:
            return refusal("tenant", tenant, self.bounds)
        seat_id = f"{self._process}:{next(self._ids)}"
        shared = False
        if self._take is not None:
            try:
                now = time.time()
                answer = await self._take(
                    keys=[tenant_key(tenant), member_key(tenant, member)],
                    args=[
                        now,
                        now + SEAT_TTL,
                        self.bounds.per_tenant,
                        self.bounds.per_member,
                        seat_id,
                        int(SEAT_TTL * 1000),
                    ],
                )
                self._redis_answered()
            except (RedisError, OSError) as exc:
                self._redis_failed(exc)
            else:
                answer = answer.decode() if isinstance(answer, bytes) else answer
                if answer != "ok":
                    return refusal(answer, tenant, self.bounds)
                shared = True
        seat = Seat(tenant, member, seat_id, shared)
        self._tenants[tenant] += 1
        self._members[tenant, member] += 1
        if shared:
            self._shared[seat_id] = seat
            if self._keeper is None or self._keeper.done():
                self._keeper = asyncio.get_running_loop().create_task(self._keep_alive())
        return seat

    async def give_back(self, seat: Seat) -> None:
        self._tenants[seat.tenant] -= 1
        if self._tenants[seat.tenant] <= 0:
            del self._tenants[seat.tenant]
        self._members[seat.tenant, seat.member] -= 1
        if self._members[seat.tenant, seat.member] <= 0:
            del self._members[seat.tenant, seat.member]
        if self._shared.pop(seat.id, None) is not None:
            try:
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.zrem(tenant_key(seat.tenant), seat.id)
                    pipe.zrem(member_key(seat.tenant, seat.member), seat.id)
                    await pipe.execute()
            except (RedisError, OSError) as exc:
                self._redis_failed(exc)  # it lapses by itself within SEAT_TTL

    async def counts(self, tenant: str, members: list[str]) -> tuple[int, dict[str, int]]:
        """Seats held now: the tenant's, and each member's of `members` (in every web process
        sharing the Redis, else in this one)."""
        if self._redis is not None:
            try:
                now = time.time()
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.zcount(tenant_key(tenant), now, "+inf")
                    for member in members:
                        pipe.zcount(member_key(tenant, member), now, "+inf")
                    tenant_count, *member_counts = await pipe.execute()
                self._redis_answered()
                return tenant_count, dict(zip(members, member_counts, strict=True))
            except (RedisError, OSError) as exc:
                self._redis_failed(exc)
        return self._tenants[tenant], {m: self._members[tenant, m] for m in members}

    async def _keep_alive(self) -> None:
        while self._shared:
            await asyncio.sleep(KEEP_ALIVE)
            seats = list(self._shared.values())
            expires = time.time() + SEAT_TTL
            try:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for seat in seats:
                        for key in (tenant_key(seat.tenant), member_key(seat.tenant, seat.member)):
                            pipe.zadd(key, {seat.id: expires})  # back after an outage too
                            pipe.pexpire(key, int(SEAT_TTL * 1000))
                    await pipe.execute()
                self._redis_answered()
            except (RedisError, OSError) as exc:
                self._redis_failed(exc)

    def _redis_failed(self, exc: Exception) -> None:
        if not self._redis_failing:
            log.warning("live view seats: Redis does not answer, bounds per process only: %s", exc)
        self._redis_failing = True

    def _redis_answered(self) -> None:
        if self._redis_failing:
            log.warning("live view seats: Redis answers again, bounds across processes")
        self._redis_failing = False

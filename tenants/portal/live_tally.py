"""What a tenant's live pages showed today (UTC): messages shown, and those not shown because a
page was over its rate. For the tenant's dashboard; the operators' figures are the Prometheus
counters (tenants/portal/live_metrics.py).

Counted in memory on the hot path; `totals()` (every few seconds per tenant with viewers) adds
what was counted since to the day's totals, in this process or, with a Redis, in one hash per
tenant and day that every web process adds to (kept two days). Without Redis, or while it does
not answer, the totals are this process's.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from redis.exceptions import RedisError

log = logging.getLogger(__name__)

KEEP_SECONDS = 2 * 86400
FIELDS = ("shown", "not_shown")


def today() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d")


def day_key(tenant: str, day: str) -> str:
    return f"live:{{{tenant}}}:shown:{day}"


class Tally:
    def __init__(self, redis: Any = None) -> None:
        self._redis = redis
        self._pending: Counter[tuple[str, str]] = Counter()  # (tenant, field) since totals()
        self._unsent: Counter[tuple[str, str]] = Counter()  # not yet added in Redis
        self._local: dict[tuple[str, str], Counter[str]] = {}  # (tenant, day) -> field -> n
        self._redis_failing = False

    def count(self, tenant: str, shown: int, not_shown: int) -> None:
        if shown:
            self._pending[tenant, "shown"] += shown
        if not_shown:
            self._pending[tenant, "not_shown"] += not_shown

    async def totals(self, tenant: str) -> dict[str, int]:
        """Today's totals for `tenant`, with what this process counted since the last call."""
        day = today()
        local = self._local.setdefault((tenant, day), Counter())
        for field in FIELDS:
            fresh = self._pending.pop((tenant, field), 0)
            local[field] += fresh
            self._unsent[tenant, field] += fresh
        for key in [k for k in self._local if k[0] == tenant and k[1] != day]:
            del self._local[key]  # yesterday's
        if self._redis is not None:
            key = day_key(tenant, day)
            try:
                async with self._redis.pipeline(transaction=False) as pipe:
                    for field in FIELDS:
                        pipe.hincrby(key, field, self._unsent[tenant, field])
                    pipe.expire(key, KEEP_SECONDS)
                    pipe.hmget(key, *FIELDS)
                    *_, figures = await pipe.execute()
            except (RedisError, OSError) as exc:
                if not self._redis_failing:
                    log.warning("live view tally: Redis does not answer: %s", exc)
                self._redis_failing = True
            else:
                self._redis_failing = False
                for field in FIELDS:
                    del self._unsent[tenant, field]
                return {field: int(n or 0) for field, n in zip(FIELDS, figures, strict=True)}
        else:
            for field in FIELDS:
                del self._unsent[tenant, field]
        return {field: local[field] for field in FIELDS}

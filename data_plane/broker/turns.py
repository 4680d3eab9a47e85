"""Each tenant's share of a turn of the event loop (issue 28: a noisy neighbour).

One event loop serves every tenant of a broker process. A tenant whose many connections all have
packets ready would otherwise have all of them handled in one turn of the loop, and another
tenant's packet would wait behind the lot. So the packets each tenant's connections handle in a
turn are counted, and a tenant that has had more than its share has its connections' further
reads wait for a later turn (their packets held, reading paused: `flow.ReadGate.next_turn`;
resumed in the order they came, while the tenant is under its share: `wait_turn`), looked at
within a read too (a read is decoded and handled up to the tenant's room in the turn:
`flow.ReadGate.read_slice`).

Its share: at least `PER_TURN` packets, and twice what the other tenants active lately handled
in a turn, on average (a turn every `SAMPLE` seconds counts, smoothed over about ten of them).
So a tenant flooding beside quiet ones is held to `PER_TURN` a turn — 64 QoS 0 publishes with a
subscriber each are about 2-3 ms of this loop's work, the most another tenant's packet waits
for it (512 let a turn run to 20 ms: `bench.noisy`, issue 44) — while tenants that are all busy
alike, or a tenant alone, are never held back: holding them would only split the loop's work
into more, smaller turns (more writes of fewer bytes each) and help nobody. Connections before
CONNACK share one count (tenant ""), so a storm of strangers' CONNECTs takes its turn like
anyone else.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable

PER_TURN = 64  # packets a tenant's connections may always handle in one turn of the loop
SAMPLE = 0.01  # seconds between the turns that move the averages (and the shares)
SMOOTHING = 0.1  # weight of a sampled turn in each tenant's average packets per turn
FORGOTTEN = 0.01  # below this average (packets per turn) a tenant no longer counts as active
UNLIMITED = float("inf")


class TenantTurns:
    __slots__ = (
        "spent", "per_turn", "limiting", "limits", "default_limit", "average", "_top",
        "_reset_due", "_next_sample", "waiting",
    )  # fmt: skip

    def __init__(self, per_turn: int = PER_TURN) -> None:
        self.spent: dict[str, int] = {}  # tenant -> packets handled in this turn
        self.per_turn = per_turn
        self.limiting = False  # shares apply: two tenants or more were busy lately
        self.limits: dict[str, float] = {}  # tenant -> its share of this turn
        self.default_limit = UNLIMITED  # the share of a tenant not active lately
        self.average: dict[str, float] = {}  # tenant -> packets per turn, lately
        self._top = 0  # the most one tenant handled in this turn
        self._reset_due = False
        self._next_sample = 0.0
        # tenant -> its connections that had to leave the rest of their reads to a later turn,
        # in the order they came: resumed from the front while the tenant is under its share.
        self.waiting: dict[str, deque[Callable[[], None]]] = {}

    def over(self, tenant: str, handling: int = 0) -> bool:
        """The tenant has had its share of this turn, with `handling` packets of a read handled
        but not counted yet (callers ask `limiting` first)."""
        return self.spent.get(tenant, 0) + handling >= self.limits.get(tenant, self.default_limit)

    def room(self, tenant: str) -> float:
        """Packets the tenant may still handle in this turn (callers ask `limiting` first)."""
        return self.limits.get(tenant, self.default_limit) - self.spent.get(tenant, 0)

    def spend(self, tenant: str, count: int) -> None:
        spent = self.spent
        value = spent[tenant] = spent.get(tenant, 0) + count
        if value > self._top:
            self._top = value
        if not self._reset_due:  # the count starts again with the next turn
            self._next_turn()

    def wait_turn(self, tenant: str, resume: Callable[[], None]) -> None:
        """The tenant had its share of this turn: `resume` in a later one, once the tenant's
        connections that came to wait before it have had theirs (one queue per tenant, not a
        look per connection per turn)."""
        queue = self.waiting.get(tenant)
        if queue is None:
            queue = self.waiting[tenant] = deque()
        queue.append(resume)
        if not self._reset_due:
            self._next_turn()

    def _next_turn(self) -> None:
        self._reset_due = True
        asyncio.get_running_loop().call_soon(self._reset)

    def _reset(self) -> None:
        if self._top >= self.per_turn or self.average:  # a heavy turn lately: shares matter
            now = time.monotonic()
            if now >= self._next_sample:
                self._next_sample = now + SAMPLE
                self._share_out()
        self.spent.clear()
        self._top = 0
        self._reset_due = False
        if self.waiting:
            self._resume_waiting()

    def _resume_waiting(self) -> None:
        """A new turn: the waiting connections, in order, while their tenant is under its
        share (each one's resume handles what it holds, and spends)."""
        for tenant, queue in list(self.waiting.items()):
            while queue and not (self.limiting and self.over(tenant)):
                queue.popleft()()
            if not queue:
                del self.waiting[tenant]
        if self.waiting and not self._reset_due:  # (still over: the next turn, then)
            self._next_turn()

    def _share_out(self) -> None:
        """Each tenant's share of the next turn, from the averages the last turn moves."""
        average, spent = self.average, self.spent
        for tenant in average.keys() | spent.keys():
            last = spent.get(tenant, 0)
            value = (
                average[tenant] * (1 - SMOOTHING) + last * SMOOTHING if tenant in average else last
            )
            if value < FORGOTTEN:
                average.pop(tenant, None)
            else:
                average[tenant] = value
        active = len(average)
        self.limiting = active >= 2
        if not self.limiting:  # alone (or nobody): nobody to make room for
            self.limits, self.default_limit = {}, UNLIMITED
            return
        total = sum(average.values())
        floor = self.per_turn
        self.limits = {
            tenant: max(floor, 2 * (total - value) / (active - 1))
            for tenant, value in average.items()
        }
        self.default_limit = max(floor, 2 * total / active)

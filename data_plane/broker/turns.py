"""Each tenant's share of a turn of the event loop (issue 28: a noisy neighbour).

One event loop serves every tenant of a broker process. A tenant whose many connections all have
packets ready would otherwise have all of them handled in one turn of the loop, and another
tenant's packet would wait behind the lot. So the packets a tenant's connections handle in a turn
are counted; once a tenant has had `PER_TURN`, its connections' further reads wait for the next
turn (their packets held, reading paused: `flow.ReadGate.next_turn`), where the count starts
again. Connections before CONNACK share one count (tenant ""), so a storm of strangers' CONNECTs
takes its turn like anyone else.
"""

from __future__ import annotations

import asyncio

PER_TURN = 512  # packets a tenant's connections handle in one turn of the loop


class TenantTurns:
    __slots__ = ("spent", "per_turn", "_reset_due")

    def __init__(self, per_turn: int = PER_TURN) -> None:
        self.spent: dict[str, int] = {}  # tenant -> packets handled in this turn
        self.per_turn = per_turn
        self._reset_due = False

    def over(self, tenant: str) -> bool:
        """The tenant has had its share of this turn."""
        return self.spent.get(tenant, 0) >= self.per_turn

    def spend(self, tenant: str, count: int) -> None:
        spent = self.spent
        spent[tenant] = spent.get(tenant, 0) + count
        if not self._reset_due:  # the count starts again with the next turn
            self._reset_due = True
            asyncio.get_running_loop().call_soon(self._reset)

    def _reset(self) -> None:
        self.spent.clear()
        self._reset_due = False

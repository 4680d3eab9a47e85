"""Requests gathered into batches: while a batch is being committed, the requests that arrive
join the next, so a quiet shadow is answered after one transaction and a busy service commits
hundreds of requests in each.

Requests may be spread over `lanes` by shadow, each lane with one batch in flight: a shadow's
requests take effect in the order they came (AWS gives no more), and the lanes' transactions
overlap. The service runs one lane: the store pipelines a batch's statements, and several lanes
at a moderate rate only commit smaller batches more often — at 2,500 updates/s four lanes cost
0.9 s of broker CPU a second and a p99 of 22–33 ms, one lane 0.6 s and 15–17 ms, for a
flat-out rate of about 8,200 updates/s instead of 9,200 (`bench/shadows.py`, bench/RESULTS.md).

A batch holds several tenants' requests, so one request the store refuses must not fail the
others: what Postgres would refuse is refused when a request is read (`common.json_input`), and
when a batch's transaction still fails, its requests are tried again one at a time, each in a
transaction of its own (`common.stores.isolation`, the batches' shared way), so only the one that
fails alone gets AWS's 500 (logged once, without a traceback: its sender may repeat it)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

from common.runtime.cancellation import cancel_and_wait
from common.stores.isolation import each_alone
from data_plane.shadows.operations import Operation, failed_alone, reset
from data_plane.shadows.store import ShadowStore

log = logging.getLogger(__name__)

Answered = Callable[[list[Operation], int], None]


class Lane:
    __slots__ = ("pending", "task")

    def __init__(self) -> None:
        self.pending: list[Operation] = []
        self.task: asyncio.Task[None] | None = None


class Batches:
    def __init__(
        self, store: ShadowStore, answered: Answered, *, max_batch: int = 500, lanes: int = 1
    ) -> None:
        self.store = store
        self.answered = answered  # (ops, now) once a batch is done, each op with its outcome
        self.max_batch = max_batch
        self.lanes = [Lane() for _ in range(max(1, lanes))]
        self.sizes: list[int] = []  # recent batch sizes (the benchmark reads them)

    def add(self, op: Operation) -> None:
        lane = self.lanes[hash(op.key) % len(self.lanes)]
        lane.pending.append(op)
        if lane.task is None or lane.task.done():
            lane.task = asyncio.get_running_loop().create_task(self._run(lane), name="shadows")

    async def _run(self, lane: Lane) -> None:
        while lane.pending:
            ops, lane.pending = lane.pending[: self.max_batch], lane.pending[self.max_batch :]
            now = int(time.time())
            try:
                await self.store.apply(ops, now)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # none took effect: find the one(s) that fail alone
                log.warning(
                    "shadow batch of %d failed (%s): each request again alone", len(ops), exc
                )
                await self._one_by_one(ops, now)
            if len(self.sizes) >= 1000:
                del self.sizes[:500]
            self.sizes.append(len(ops))
            self.answered(ops, now)

    async def _one_by_one(self, ops: list[Operation], now: int) -> None:
        """Each of a failed batch's requests in a transaction of its own, in order
        (`common.stores.isolation`): the ones that succeed take effect, a failing one gets
        AWS's 500 (`Internal service failure`), a store away included (each is answered)."""

        async def alone(op: Operation) -> None:
            reset(op)  # what the failed transaction recorded never took effect
            await self.store.apply([op], now)

        def refused(op: Operation, exc: Exception) -> None:
            reset(op)
            failed_alone(op)
            log.warning(
                "shadow request failed alone (tenant %s, %s)",
                op.tenant,
                f"{op.topic.prefix}/{op.topic.operation}",
            )

        await each_alone("shadows", ops, alone, refused, stop_when_away=False)

    async def stop(self) -> None:
        """Finish what was taken (a batch cut midway would leave its clients unanswered)."""
        for lane in self.lanes:
            if lane.task is not None and not lane.task.done():
                try:
                    await asyncio.wait_for(asyncio.shield(lane.task), 5)
                except TimeoutError:
                    await cancel_and_wait(lane.task)

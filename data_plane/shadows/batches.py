"""Requests gathered into batches: while a batch is being committed, the requests that arrive
join the next, so a quiet shadow is answered after one transaction and a busy service commits
hundreds of requests in each.

Requests may be spread over `lanes` by shadow, each lane with one batch in flight: a shadow's
requests take effect in the order they came (AWS gives no more), and the lanes' transactions
overlap. The service runs one lane: the store pipelines a batch's statements, and several lanes
at a moderate rate only commit smaller batches more often — at 2,500 updates/s four lanes cost
0.9 s of broker CPU a second and a p99 of 22–33 ms, one lane 0.6 s and 15–17 ms, for a
flat-out rate of about 8,200 updates/s instead of 9,200 (`bench/shadows.py`, bench/RESULTS.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from common.runtime.cancellation import cancel_and_wait
from data_plane.shadows.operations import Operation
from data_plane.shadows.store import ShadowStore

Answered = Callable[[list[Operation], int, BaseException | None], None]


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
        self.answered = answered  # (ops, now, failure) once a batch is done
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
            failed: BaseException | None = None
            try:
                await self.store.apply(ops, now)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the store failed: every request gets AWS's 500
                failed = exc
            if len(self.sizes) >= 1000:
                del self.sizes[:500]
            self.sizes.append(len(ops))
            self.answered(ops, now, failed)

    async def stop(self) -> None:
        """Finish what was taken (a batch cut midway would leave its clients unanswered)."""
        for lane in self.lanes:
            if lane.task is not None and not lane.task.done():
                try:
                    await asyncio.wait_for(asyncio.shield(lane.task), 5)
                except TimeoutError:
                    await cancel_and_wait(lane.task)

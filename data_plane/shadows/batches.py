"""Requests gathered into batches: while one batch is being committed, the requests that arrive
join the next, so a quiet shadow is answered after one transaction and a busy service commits
hundreds of requests in each. One batch at a time, in arrival order: a client's requests take
effect in the order it sent them (AWS gives no more), and the versions they see follow."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from common.tasks import cancel_and_wait
from data_plane.shadows.operations import Operation
from data_plane.shadows.store import ShadowStore

Answered = Callable[[list[Operation], int, BaseException | None], None]


class Batches:
    def __init__(self, store: ShadowStore, answered: Answered, *, max_batch: int = 500) -> None:
        self.store = store
        self.answered = answered  # (ops, now, failure) once a batch is done
        self.max_batch = max_batch
        self.pending: list[Operation] = []
        self._task: asyncio.Task | None = None
        self.sizes: list[int] = []  # recent batch sizes (the benchmark reads them)

    def add(self, op: Operation) -> None:
        self.pending.append(op)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="shadows")

    async def _run(self) -> None:
        while self.pending:
            ops, self.pending = self.pending[: self.max_batch], self.pending[self.max_batch :]
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
        if self._task is not None and not self._task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 5)
            except TimeoutError:
                await cancel_and_wait(self._task)

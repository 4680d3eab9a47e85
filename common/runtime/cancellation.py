"""Background tasks' common end: cancel, then wait until the task has really finished (or,
for a stop that must go on, until a bound)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
from typing import Any

log = logging.getLogger(__name__)


# Why a task is cancelled again while it runs: on Python 3.11 `asyncio.wait_for` returns the
# awaited result when it arrives together with the cancellation, and the cancellation is lost
# (fixed in 3.12). redis-py writes each command through `wait_for` when it has a socket
# timeout, so a loop cancelled inside a Redis call often goes on to its next wait; measured:
# 81 in 300 cancelled pipeline loops went on (redis-py 8.1, 6.4 alike). Cancelling again
# reaches that next wait.
RECANCEL_EVERY = 0.05


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` (if any) and wait for it to end; its own errors still surface."""
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=RECANCEL_EVERY)
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def stop_all(tasks: list[asyncio.Task[Any]], what: str, within: float = 3.0) -> None:
    """Cancel `tasks` (again every RECANCEL_EVERY seconds: see above) and wait for them, but no
    longer than `within` seconds: a task that still does not end (it catches every
    cancellation) is logged with where it waits, and left behind, so that a graceful stop goes on to what follows (leaving the
    cluster, committing sessions) instead of hanging until the orchestrator's SIGKILL."""
    if not tasks:
        return
    deadline = asyncio.get_running_loop().time() + within
    pending = set(tasks)
    while pending:
        for task in pending:
            task.cancel()
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            break
        _done, pending = await asyncio.wait(pending, timeout=min(left, RECANCEL_EVERY))
    for task in pending:
        log.warning("%s: a task did not stop within %g s: %s", what, within, where(task))


def where(task: asyncio.Task[Any]) -> str:
    """The stack `task` waits in, as text (for a log line)."""
    stack = io.StringIO()
    task.print_stack(file=stack)
    return stack.getvalue()

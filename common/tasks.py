"""Background tasks' common end: cancel, then wait until the task has really finished (or,
for a stop that must go on, until a bound)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging

log = logging.getLogger(__name__)


async def cancel_and_wait(task: asyncio.Task | None) -> None:
    """Cancel `task` (if any) and wait for it to end; its own errors still surface."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def stop_all(tasks: list[asyncio.Task], what: str, within: float = 3.0) -> None:
    """Cancel `tasks` and wait for them, but no longer than `within` seconds: a task that does
    not end (it swallowed its cancellation, or waits in an `finally`) is logged with where it
    waits, and left behind, so that a graceful stop goes on to what follows (leaving the
    cluster, committing sessions) instead of hanging until the orchestrator's SIGKILL."""
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    _done, pending = await asyncio.wait(tasks, timeout=within)
    for task in pending:
        log.warning("%s: a task did not stop within %g s: %s", what, within, where(task))


def where(task: asyncio.Task) -> str:
    """The stack `task` waits in, as text (for a log line)."""
    stack = io.StringIO()
    task.print_stack(file=stack)
    return stack.getvalue()

"""Background tasks' common end: cancel, then wait until the task has really finished."""

from __future__ import annotations

import asyncio
import contextlib


async def cancel_and_wait(task: asyncio.Task | None) -> None:
    """Cancel `task` (if any) and wait for it to end; its own errors still surface."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task

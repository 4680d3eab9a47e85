"""common.tasks: a graceful stop is bounded even when a task will not end."""

import asyncio
import logging
import time

from common.tasks import stop_all


async def _stubborn(released: asyncio.Event) -> None:
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await released.wait()  # e.g. a `finally` awaiting a lock held elsewhere
            return


def test_stop_all_ends_the_tasks_that_end_and_reports_the_one_that_does_not(caplog):
    async def scenario() -> tuple[float, list[bool]]:
        released = asyncio.Event()
        polite = asyncio.create_task(asyncio.sleep(3600))
        stubborn = asyncio.create_task(_stubborn(released), name="stubborn")
        await asyncio.sleep(0)
        start = time.monotonic()
        await stop_all([polite, stubborn], "test", within=0.3)
        took = time.monotonic() - start
        states = [polite.done(), stubborn.done()]
        released.set()
        await stubborn
        return took, states

    with caplog.at_level(logging.WARNING, logger="common.tasks"):
        took, (polite_done, stubborn_done) = asyncio.run(scenario())
    assert polite_done and not stubborn_done
    assert 0.25 <= took < 2
    [record] = caplog.records
    assert "test: a task did not stop within 0.3 s" in record.getMessage()
    assert "_stubborn" in record.getMessage()  # where it waits


def test_stop_all_returns_at_once_when_every_task_ends():
    async def scenario() -> float:
        tasks = [asyncio.create_task(asyncio.sleep(3600)) for _ in range(3)]
        await asyncio.sleep(0)
        start = time.monotonic()
        await stop_all(tasks, "test", within=5)
        assert all(task.cancelled() for task in tasks)
        return time.monotonic() - start

    assert asyncio.run(scenario()) < 0.5

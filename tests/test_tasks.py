"""common.runtime.cancellation: a graceful stop is bounded even when a task will not end."""

import asyncio
import logging
import time

from common.runtime.cancellation import cancel_and_wait, stop_all


async def _stubborn(released: asyncio.Event) -> None:
    while not released.is_set():  # catches every cancellation, however often it comes
        try:
            await released.wait()
        except asyncio.CancelledError:
            continue


async def _loses_one_cancellation(lost: list[bool]) -> None:
    """A loop whose Redis call lost the cancellation (Python 3.11's asyncio.wait_for returns a
    result that came with it) and goes on to its next wait."""
    while True:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            if lost:
                raise
            lost.append(True)


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

    with caplog.at_level(logging.WARNING, logger="common.runtime.cancellation"):
        took, (polite_done, stubborn_done) = asyncio.run(scenario())
    assert polite_done and not stubborn_done
    assert 0.25 <= took < 2
    [record] = caplog.records
    assert "test: a task did not stop within 0.3 s" in record.getMessage()
    assert "_stubborn" in record.getMessage()  # where it waits


def test_stop_all_ends_a_loop_that_lost_its_first_cancellation_quickly(caplog):
    async def scenario() -> tuple[float, asyncio.Task]:
        lost: list[bool] = []
        task = asyncio.create_task(_loses_one_cancellation(lost))
        await asyncio.sleep(0)
        start = time.monotonic()
        await stop_all([task], "test", within=3)
        assert lost == [True]
        return time.monotonic() - start, task

    with caplog.at_level(logging.WARNING, logger="common.runtime.cancellation"):
        took, task = asyncio.run(scenario())
    assert task.cancelled() and took < 0.5
    assert not caplog.records


def test_cancel_and_wait_ends_a_loop_that_lost_its_first_cancellation():
    async def scenario() -> asyncio.Task:
        task = asyncio.create_task(_loses_one_cancellation([]))
        await asyncio.sleep(0)
        await asyncio.wait_for(cancel_and_wait(task), 1)
        return task

    assert asyncio.run(scenario()).cancelled()


def test_stop_all_returns_at_once_when_every_task_ends():
    async def scenario() -> float:
        tasks = [asyncio.create_task(asyncio.sleep(3600)) for _ in range(3)]
        await asyncio.sleep(0)
        start = time.monotonic()
        await stop_all(tasks, "test", within=5)
        assert all(task.cancelled() for task in tasks)
        return time.monotonic() - start

    assert asyncio.run(scenario()) < 0.5

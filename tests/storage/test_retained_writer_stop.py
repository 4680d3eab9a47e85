"""A graceful stop waits for the retained change being written, not only for the queue to empty.

Before: stop() waited until the queue was empty and cancelled the writer, which had taken the
last change off the queue and was still writing it; that change never reached Postgres.
"""

from __future__ import annotations

import asyncio
import contextlib

from data_plane.broker.message import Message
from data_plane.storage.retained_delayed import RetainedAndDelayed


class _SlowConnection:
    def __init__(self, written: list[str]) -> None:
        self.written = written

    async def execute(self, sql: str, params: tuple) -> None:
        await asyncio.sleep(0.2)  # a busy database
        self.written.append(params[0])


class _SlowPool:
    def __init__(self) -> None:
        self.written: list[str] = []

    @contextlib.asynccontextmanager
    async def connection(self):
        yield _SlowConnection(self.written)


def test_stop_waits_for_the_retained_write_in_flight():
    async def scenario() -> list[str]:
        pool = _SlowPool()
        kept = RetainedAndDelayed(pool)
        kept.start()
        for topic in ("a/1", "a/2"):  # as the broker reports them through its port
            kept.retained_changed(Message(topic, b"v", 1, True, tenant="acme", publisher="c1"))
        await asyncio.sleep(0.25)  # the first is written, the second is being written
        await kept.stop()
        return pool.written

    assert asyncio.run(scenario()) == ["a/1", "a/2"]

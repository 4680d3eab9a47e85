"""The archive tap's batches: every row tapped reaches the object store, whatever the moment the
broker stops.

Found by `bench.archive`: at ~50,000 msg/s a second of rows went missing from some runs. The
stop came while the periodic flush's batch was still encoding; with nothing new buffered, stop()
neither waited for it nor uploaded what it produced. A slow encoder makes that moment certain.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pyarrow.parquet as pq

from common.archive_schema import EVENT_PUBLISH
from common.object_store import LocalObjectStore
from data_plane.broker.hooks import Hooks
from data_plane.broker.message import Message
from data_plane.storage.archive_hook import ArchiveTap
from data_plane.storage.parquet_archive import ParquetArchiveWriter


class _Broker:
    def __init__(self) -> None:
        self.hooks = Hooks()


class SlowEncodingWriter(ParquetArchiveWriter):
    """Encodes like the real writer, after a pause long enough for stop() to arrive mid-batch."""

    def __init__(self, *args, delay: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.delay = delay
        self.encoding = threading.Event()

    def encode(self, *args, **kwargs) -> int:
        self.encoding.set()
        time.sleep(self.delay)
        return super().encode(*args, **kwargs)


def _archived_publishes(root) -> int:
    total = 0
    for path in (root / "archive").rglob("*.parquet"):
        events = pq.read_table(path, columns=["event"])["event"].to_pylist()
        total += events.count(EVENT_PUBLISH)
    return total


def _publish(broker: _Broker, index: int) -> None:
    message = Message(f"t/{index}", b"x" * 100, 1, False, tenant="acme", publisher="c1", device="d")
    broker.hooks.filter_publish(message)


def test_stop_during_the_periodic_batchs_encoding_still_uploads_it(tmp_path):
    async def scenario() -> None:
        broker = _Broker()
        writer = SlowEncodingWriter(LocalObjectStore(tmp_path), delay=0.5)
        tap = ArchiveTap(broker, writer, interval=0.05)
        tap.start()
        for index in range(1000):
            _publish(broker, index)
        # The periodic flush has taken every row and the builder is encoding them: nothing new
        # is buffered when the broker is told to stop.
        await asyncio.to_thread(writer.encoding.wait, 5)
        assert not len(tap._columns)
        await tap.stop()

    asyncio.run(scenario())
    assert _archived_publishes(tmp_path) == 1000


def test_rows_tapped_while_batches_encode_and_at_stop_all_arrive(tmp_path):
    async def scenario() -> None:
        broker = _Broker()
        writer = SlowEncodingWriter(LocalObjectStore(tmp_path), delay=0.03)
        tap = ArchiveTap(broker, writer, interval=0.01)
        tap.start()
        for index in range(3000):
            _publish(broker, index)
            if index % 100 == 0:
                await asyncio.sleep(0.005)
        await tap.stop()

    asyncio.run(scenario())
    assert _archived_publishes(tmp_path) == 3000

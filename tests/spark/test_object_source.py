"""The live segments stream's offsets (`spark.object_source`), driven directly: each batch reads
the segments above every writer's last sequence, exactly once, whatever order the keys sort in;
markers and other objects are never read. (End to end on moto's S3: tests/spark/test_live_s3.py.)"""

from __future__ import annotations

import time

from common.archive.schema import COMPACTED_MARKER, live_hour_prefix, live_segment_key
from spark.object_source import LiveSegmentsReader, segment_writer_sequence
from tests.spark.conftest import message, parquet_bytes


def _put(store, writer: str, sequence: int) -> str:
    now = int(time.time() * 1000)
    key = live_segment_key(now, writer, sequence)
    store.put(key, parquet_bytes([message("acme", "t", {"n": sequence}, now)]))
    return key


def _keys(reader, start, end) -> list[str]:
    return sorted(k for p in reader.partitions(start, end) for k in p.keys)


def test_each_segment_is_read_once_per_writer_sequence(store):
    reader = LiveSegmentsReader({"url": store.url}, schema=None)
    first = [_put(store, "broker-b", 1), _put(store, "broker-a", 1), _put(store, "broker-a", 2)]
    store.put(live_hour_prefix(int(time.time() * 1000)) + COMPACTED_MARKER, b"{}")
    start = reader.initialOffset()
    end = reader.latestOffset(start, None)
    assert end["writers"] == {"broker-a": 2, "broker-b": 1}
    assert _keys(reader, start, end) == sorted(first)
    # `broker-a-0000000003` sorts before `broker-b-…`: offsets per writer, not by key order
    later = [_put(store, "broker-a", 3), _put(store, "broker-b", 2), _put(store, "broker-c", 1)]
    after = reader.latestOffset(end, None)
    assert _keys(reader, end, after) == sorted(later)
    assert reader.latestOffset(after, None) == after  # nothing new: the same offset
    assert _keys(reader, after, after) == []
    # a restarted reader (no cached listing) plans the same batch from the offsets alone
    again = LiveSegmentsReader({"url": store.url}, schema=None)
    assert _keys(again, end, after) == sorted(later)


def test_only_live_segment_names_are_segments():
    assert segment_writer_sequence("archive/live/date=x/hour=01/host-1-0000000042.parquet") == (
        "host-1",
        42,
    )
    assert segment_writer_sequence("archive/live/date=x/hour=01/_COMPACTED") is None
    assert segment_writer_sequence("archive/live/date=x/hour=01/a.parquet.partial") is None
    assert segment_writer_sequence("archive/live/date=x/hour=01/nosequence.parquet") is None

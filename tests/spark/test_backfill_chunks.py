"""How a backfill splits its range into chunks (progress steps, one Spark job each): whole hours,
at most `max_chunks`, and at least `min_files` files each so every core has a file to read (a
history part is one row group: one task)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from common.archive.files import ArchiveFile
from spark.rules.backfill import chunked


def listing(hours: int, per_hour: int = 1) -> list[ArchiveFile]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        ArchiveFile(f"h{h}-{i}.parquet", "parquet", False, start + timedelta(hours=h))
        for h in range(hours)
        for i in range(per_hour)
    ]


def test_ten_hour_files_on_two_cores_make_chunks_of_four():
    chunks = chunked(listing(10), max_chunks=20, min_files=4)
    assert [len(c) for c in chunks] == [4, 4, 2]
    assert [f for c in chunks for f in c] == listing(10)  # every file once, in order


def test_without_a_minimum_each_hour_is_its_own_chunk():
    assert [len(c) for c in chunked(listing(10), max_chunks=20)] == [1] * 10


def test_an_hour_is_never_split_across_chunks():
    chunks = chunked(listing(3, per_hour=3), max_chunks=20, min_files=2)
    assert [len(c) for c in chunks] == [3, 3, 3]
    assert all(len({f.hour for f in c}) == 1 for c in chunks)


def test_max_chunks_still_bounds_the_steps():
    assert len(chunked(listing(100), max_chunks=10, min_files=2)) == 10

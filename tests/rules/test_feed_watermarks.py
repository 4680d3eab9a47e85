"""The alarms' clock from the live feed's marks (`spark.rules.feed.Watermarks`): the lowest live
writer's mark; unknown while a writer without marks (an older broker) is heard, or none is."""

from __future__ import annotations

from spark.rules.feed import Watermarks


def mark(writer: bytes, ms: int, bye: bool = False) -> dict[bytes, object]:
    fields: dict[bytes, object] = {b"s": writer, b"w": str(ms).encode()}
    if bye:
        fields[b"b"] = b"1"
    return fields


def test_the_fence_is_the_lowest_writers_mark_and_a_gone_one_stops_holding_it(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr("spark.rules.feed.time.monotonic", lambda: clock[0])
    marks = Watermarks()
    assert marks.fence() is None  # no writer heard: unknown
    marks.saw(mark(b"a", 10_000))
    marks.saw(mark(b"b", 9_500))
    assert marks.fence() == 9.5
    marks.saw({b"s": b"b", b"a": b"rows", b"n": b"3"})  # rows: heard, mark unchanged
    marks.saw(mark(b"b", 10_400))
    assert marks.fence() == 10.0
    marks.saw(mark(b"a", 10_500, bye=True))  # `a` stops: it holds nothing back
    assert marks.fence() == 10.4
    marks.saw(mark(b"c", 11_000))
    clock[0] += Watermarks.STALE + 0.1  # `b` went silent (killed): after STALE it is gone...
    marks.saw(mark(b"c", 11_100))
    assert marks.fence() == 11.1


def test_a_writer_heard_only_through_rows_or_an_older_broker_leaves_the_fence_unknown(
    monkeypatch,
):
    clock = [100.0]
    monkeypatch.setattr("spark.rules.feed.time.monotonic", lambda: clock[0])
    marks = Watermarks()
    marks.saw(mark(b"a", 10_000))
    marks.saw({b"s": b"new", b"a": b"rows", b"n": b"1"})  # its first mark not read yet
    assert marks.fence() is None
    marks.saw(mark(b"new", 10_200))
    assert marks.fence() == 10.0
    marks.saw({b"a": b"rows", b"n": b"1"})  # rows with no writer: a broker sending no marks
    assert marks.fence() is None
    clock[0] += Watermarks.UNMARKED_FOR + 1
    marks.saw(mark(b"a", 12_000))
    marks.saw(mark(b"new", 12_000))
    assert marks.fence() == 12.0

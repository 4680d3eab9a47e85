"""The broker's end of the live feed (issue 43): the rows tenants' rules read, handed to the live
rules job through a real Redis stream as the archive writes them, with the archive's message ids."""

from __future__ import annotations

import asyncio
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.archive.history_policy import archive_needs
from common.archive.live_feed_format import (
    BYE_FIELD,
    MARK_FIELD,
    ROWS_FIELD,
    WRITER_FIELD,
    decode_entry,
)
from common.archive.schema import message_ids
from common.runtime import embedded
from common.stores.object_store import LocalObjectStore
from data_plane.broker.message import Message
from data_plane.storage.archive_columns import publish_columns
from data_plane.storage.archive_decision import rule_sources
from data_plane.storage.archive_hook import ArchiveTap
from data_plane.storage.live_feed import LiveFeed
from data_plane.storage.parquet_archive import ParquetArchiveWriter


@pytest.fixture
def feed():
    key = f"rules:test:{uuid.uuid4().hex}"
    live = LiveFeed(embedded.redis_url(), key=key)
    yield live
    live.close()
    live.client.delete(key)


def entries(feed: LiveFeed, timeout: float = 5.0) -> pa.Table:
    """Every row the feed sent so far (waiting for its thread to send what it was given)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and feed._queue:
        time.sleep(0.01)
    time.sleep(0.05)
    found = feed.client.xrange(feed.key)
    tables = [decode_entry(fields[ROWS_FIELD]) for _, fields in found if ROWS_FIELD in fields]
    return pa.concat_tables(tables) if tables else pa.table({})


def message(topic: str, tenant: str, seq: int) -> Message:
    return Message(
        topic, b'{"seq": %d}' % seq, 1, False, tenant=tenant, publisher="dev-1", device="dev"
    )


def test_the_rows_a_tenants_rules_read_reach_the_stream_with_the_archives_message_ids(
    feed, tmp_path
):
    needs = archive_needs(
        policy_filters=[],
        default_days=7,
        archive_enabled=True,
        rule_sources=[rule_sources('SELECT * FROM "sensors/+/temp", "$events/client_connected"')],
    )
    feed.set_rules("acme", needs.rule_filters, needs.rule_events)
    # `quiet` archives everything and has no rule: none of its rows may reach the feed.
    store = LocalObjectStore(tmp_path)
    writer = ParquetArchiveWriter(store, feed=feed)
    now = time.time()
    batch = [
        (now, message("sensors/1/temp", "acme", 0)),
        (now, message("sensors/1/humidity", "acme", 1)),  # archived, read by no rule
        (now, message("sensors/1/temp", "quiet", 2)),
        (now, message("sensors/2/temp", "acme", 3)),
    ]
    event = {"event": "client.connected", "tenant": "acme", "ts": int(now * 1000), "client_id": "c"}
    writer.add(publish_columns(batch), [event])
    writer.add(publish_columns([(now, message("sensors/3/temp", "acme", 4))]), [])
    writer.seal()
    writer.upload_pending()

    sent = entries(feed).to_pylist()
    assert [(r["topic"], r["event"]) for r in sent] == [
        ("sensors/1/temp", "message.publish"),
        ("sensors/2/temp", "message.publish"),
        (None, "client.connected"),
        ("sensors/3/temp", "message.publish"),
    ]
    assert all(r["tenant"] == "acme" for r in sent)
    assert feed.sent_rows == 4 and feed.dropped_rows == 0
    # Each row's id is the one the archive's readers derive for it: the action ledger's key.
    [key] = store.list("archive/live/")
    table = pq.read_table(tmp_path / key)
    archived = dict(
        zip(message_ids(key, table.num_rows).to_pylist(), table.to_pylist(), strict=True)
    )
    for row in sent:
        same = archived[row["message_id"]]
        assert (same["topic"], same["event"], same["payload"]) == (
            row["topic"],
            row["event"],
            row["payload"],
        )


def test_a_tenant_without_rules_sends_nothing_and_losing_its_rules_stops_the_feed(feed, tmp_path):
    writer = ParquetArchiveWriter(LocalObjectStore(tmp_path), feed=feed)
    now = time.time()
    writer.add(publish_columns([(now, message("a/b", "acme", 0))]), [])
    feed.set_rules("acme", ["a/#"], [])
    writer.add(publish_columns([(now, message("a/b", "acme", 1))]), [])
    feed.set_rules("acme", [], [])  # its last rule disabled
    writer.add(publish_columns([(now, message("a/b", "acme", 2))]), [])
    assert [r["payload"] for r in entries(feed).to_pylist()] == [b'{"seq": 1}']


def test_a_slow_or_absent_redis_drops_rows_counted_never_blocking(tmp_path, caplog):
    # Nothing listens on this port: every send fails, and the builder never waits for it.
    feed = LiveFeed(f"redis://127.0.0.1:{embedded.free_port()}/0", key="rules:nowhere")
    try:
        feed.set_rules("acme", ["#"], [])
        writer = ParquetArchiveWriter(LocalObjectStore(tmp_path), feed=feed)
        started = time.monotonic()
        for seq in range(3):
            writer.add(publish_columns([(time.time(), message("a/b", "acme", seq))]), [])
        assert time.monotonic() - started < 1.0
        deadline = time.monotonic() + 10
        while feed.dropped_rows < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert feed.dropped_rows == 3 and feed.sent_rows == 0
        assert "run them with manage.py run_rules --from" in caplog.text
    finally:
        feed.close()


def test_the_stream_keeps_only_its_last_seconds(feed, tmp_path):
    small = LiveFeed(embedded.redis_url(), key=feed.key, keep_seconds=0.2, client=feed.client)
    try:
        small.set_rules("acme", ["#"], [])
        writer = ParquetArchiveWriter(LocalObjectStore(tmp_path), feed=small)
        for seq in range(300):
            writer.add(publish_columns([(time.time(), message("a/b", "acme", seq))]), [])
            time.sleep(0.005)
        small.close()
        assert small.sent_entries == 300
        assert feed.client.xlen(feed.key) < 300  # Redis trims (in whole nodes) what is older
    finally:
        small.close()


def test_the_tap_marks_the_stream_after_the_rows_it_covers_not_while_idle(feed, tmp_path):
    """Each writer's mark says everything it received before it is in the stream already: the
    live job's alarms fire a timer once every writer's mark is past its instant (no guessed
    lag). Through the real tap on its event loop; none while idle, and its stop's last mark."""
    feed.set_rules("acme", ["#"], [])

    async def scenario() -> list[float]:
        tap = ArchiveTap(ParquetArchiveWriter(LocalObjectStore(tmp_path), feed=feed))
        tap.start()
        received = []
        for seq in range(20):
            received.append(time.time())
            tap.record(message(f"a/{seq}", "acme", seq))
            await asyncio.sleep(0.013)
        await asyncio.sleep(0.5)  # idle: no mark
        await tap.stop()
        return received

    received = asyncio.run(scenario())
    found = feed.client.xrange(feed.key)
    seen_rows: list[int] = []
    marks = []
    for _, fields in found:
        assert fields[WRITER_FIELD] == feed.writer
        if ROWS_FIELD in fields:
            seen_rows += [r["ts"] for r in decode_entry(fields[ROWS_FIELD]).to_pylist()]
        else:
            mark = int(fields[MARK_FIELD])
            marks.append(mark)
            # Every message received before the mark's time is in an entry before it.
            before = [t for t in received if t * 1000 < mark]
            assert len(seen_rows) >= len(before)
    assert len(seen_rows) == 20
    assert marks == sorted(marks)
    assert marks and marks[-1] >= received[-1] * 1000  # the last rows covered
    idle = [m for m in marks if m > received[-1] * 1000 + 100]
    assert len(idle) <= 1  # the stop's last mark at most
    assert BYE_FIELD in found[-1][1]  # the last: the writer stops

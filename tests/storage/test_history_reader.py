"""`storage.history`: archived rows back as the broker's messages — only the filter's topics,
the publish properties as they were published, expired ones left out."""

from datetime import UTC, datetime, timedelta

import pyarrow as pa

from common.archive.files import compact_hour
from common.archive.schema import ARCHIVE_SCHEMA
from common.stores.object_store import open_object_store
from data_plane.broker.message import Message
from data_plane.storage.archive_columns import publish_columns
from data_plane.storage.history import _COLUMNS, ArchiveHistory, _messages
from data_plane.storage.parquet_archive import ParquetArchiveWriter


def _table(rows: list[dict]) -> pa.Table:
    full = [{name: row.get(name) for name in _COLUMNS} for row in rows]
    schema = pa.schema([ARCHIVE_SCHEMA.field(name) for name in _COLUMNS])
    return pa.Table.from_pylist(full, schema=schema)


def test_rows_become_messages_with_their_properties():
    now = datetime.now(UTC)
    table = _table(
        [
            {"ts": now, "client_id": "c1", "topic": "plant/1/temp", "qos": 1, "payload": b"a"},
            {"ts": now, "client_id": "c2", "topic": "plant/1/hum", "qos": 0, "payload": b"b"},
            {
                "ts": now,
                "client_id": "c3",
                "topic": "plant/2/temp",
                "qos": 2,
                "payload": b"c",
                "content_type": "application/json",
                "user_properties": [{"key": "k", "value": "v"}, {"key": "k", "value": "w"}],
                "correlation_data": b"\x01",
                "message_expiry": 3600,
            },
            {
                "ts": now - timedelta(hours=2),
                "client_id": "c4",
                "topic": "plant/3/temp",
                "qos": 1,
                "payload": b"gone",
                "message_expiry": 60,
            },
        ]
    )
    plain = _messages("acme", "plant/+/temp", table.slice(0, 2))
    assert [(m.topic, m.payload, m.qos, m.publisher, m.tenant) for m in plain] == [
        ("plant/1/temp", b"a", 1, "c1", "acme")
    ]
    messages = _messages("acme", "plant/+/temp", table)
    assert [m.payload for m in messages] == [b"a", b"c"]  # b: another topic; gone: expired
    props = messages[1].properties
    assert props["content_type"] == "application/json"
    assert props["user_property"] == [("k", "v"), ("k", "w")]
    assert props["correlation_data"] == b"\x01"
    assert 3590 <= props["message_expiry_interval"] <= 3600


def test_an_hour_reads_the_same_before_and_after_its_compaction(tmp_path):
    store = open_object_store(tmp_path.as_uri())
    hour = datetime(2023, 11, 14, 22, tzinfo=UTC)
    t0 = hour.timestamp() + 60
    rows = [
        (
            t0 + i,
            Message.from_publish(
                t, "c", f"plant/{i % 2}/temp", f"{t}{i}".encode(), 1, False, {}, "d"
            ),
        )
        for i, t in enumerate(["acme", "zeta", "acme", "acme", "zeta", "acme"])
    ]
    writer = ParquetArchiveWriter(store, writer_id="w1")
    writer.encode(publish_columns(rows), [], None)
    writer.upload_pending()
    history = ArchiveHistory(None, store, None)  # type: ignore[arg-type]  # reading only
    start, end = int(hour.timestamp() * 1000), int((hour + timedelta(hours=2)).timestamp() * 1000)

    def read() -> list[tuple[str, bytes]]:
        return [
            (m.topic, m.payload)
            for b in history.read("acme", "plant/+/temp", start, end)
            for m in b
        ]

    live = read()
    assert live == [
        ("plant/0/temp", b"acme0"),
        ("plant/0/temp", b"acme2"),
        ("plant/1/temp", b"acme3"),
        ("plant/1/temp", b"acme5"),
    ]
    compact_hour(store, "2023-11-14", 22)
    assert read() == live  # from the tenant's history parts now

"""`storage.history`: archived rows back as the broker's messages — only the filter's topics,
the publish properties as they were published, expired ones left out."""

from datetime import UTC, datetime, timedelta

import pyarrow as pa

from common.archive.schema import ARCHIVE_SCHEMA
from data_plane.storage.history import _COLUMNS, _messages


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

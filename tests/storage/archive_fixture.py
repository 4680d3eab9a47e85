"""How `tests/storage/fixtures/archive-v2/` was made: archive files written by the writer of the day
(2026-11-27, main at 8c0e4e3: the C recorder, `ParquetArchiveWriter`, `compact_hour`), kept as
they are so that `test_archive_format.py` proves later readers still read them.

Do not regenerate them to make a test pass: that test is about files written *before* a change.
When the format changes, add the new version's files beside these (a new folder) and keep these.

    .venv/bin/python -m tests.storage.archive_fixture tests/storage/fixtures/archive-v2
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

from common.archive.files import compact_hour
from common.stores.object_store import LocalObjectStore
from data_plane.broker.message import Message
from data_plane.storage.archive_columns import publish_columns
from data_plane.storage.parquet_archive import ParquetArchiveWriter

COMPACTED_HOUR = datetime(2026, 11, 26, 10, tzinfo=UTC)  # compacted into acme's history
LIVE_HOUR = datetime(2026, 11, 26, 11, tzinfo=UTC)  # left as a live segment
PROPERTIES = {
    "payload_format_indicator": 0,
    "content_type": "application/octet-stream",
    "user_property": [("k", "v1"), ("k", "v2"), ("unit", "°C")],
    "message_expiry_interval": 3600,
    "response_topic": "replies/acme",
    "correlation_data": b"\x00\x01corr\xff",
}


def _message(tenant, client, topic, payload, qos, retain=False, props=None) -> Message:
    return Message.from_publish(tenant, client, topic, payload, qos, retain, props or {}, "d")


def make(root: Path) -> None:
    store = LocalObjectStore(root)
    at = COMPACTED_HOUR.timestamp()
    batch = [
        (at + 1.001, _message("acme", "dev-1", "bin/1", bytes(range(256)), 1, props=PROPERTIES)),
        (at + 2.002, _message("acme", "dev-1", "sensors/1/temp", b'{"t": 21.5}', 0)),
        (at + 3.003, _message("zeta", "z-1", "sensors/1/temp", b"other tenant", 2)),
        (at + 4.004, _message("acme", "dev-2", "state", b"", 1, retain=True)),
    ]
    base = int(at * 1000)
    events = [
        {
            "event": "client.connected",
            "tenant": "acme",
            "ts": base + 500,
            "client_id": "dev-1",
            "username": "acme/d",
            "peer": "127.0.0.1:50000",
            "proto_ver": 5,
            "keepalive": 30,
            "clean_start": True,
            "session_expiry": 120,
        },
        {
            "event": "session.subscribed",
            "tenant": "acme",
            "ts": base + 600,
            "client_id": "dev-1",
            "username": "acme/d",
            "topic": "sensors/#",
            "qos": 1,
        },
        {
            "event": "client.disconnected",
            "tenant": "acme",
            "ts": base + 5000,
            "client_id": "dev-1",
            "username": "acme/d",
            "peer": "127.0.0.1:50000",
            "proto_ver": 5,
            "reason": "normal",
        },
    ]
    writer = ParquetArchiveWriter(store, writer_id="fixture")
    writer.encode(publish_columns(batch), events)
    live = [(LIVE_HOUR.timestamp() + 7.007, _message("acme", "dev-1", "late/1", b"live", 1))]
    writer.encode(publish_columns(live), [])
    writer.upload_pending()
    compact_hour(store, COMPACTED_HOUR)


if __name__ == "__main__":
    make(Path(sys.argv[1]))

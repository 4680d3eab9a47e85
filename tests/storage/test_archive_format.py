"""The archive stays open (issue 31, point 4): files written by an earlier version of the broker
and of the compaction (`fixtures/archive-v2/`, made on 2026-11-27 by `archive_fixture.py` with
the writer of that day) keep one schema, documented in docs/archive.md, and stay readable: by
today's `common.archive.files`, by pyarrow alone and by DuckDB. The expected rows are written out
here, not recomputed by today's writer."""

import shutil
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from common.archive.files import read_archive
from common.archive.schema import ARCHIVE_SCHEMA
from common.stores.object_store import LocalObjectStore

FIXTURE = Path(__file__).parent / "fixtures" / "archive-v2"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "archive.md"
START, END = datetime(2026, 11, 26, 9, tzinfo=UTC), datetime(2026, 11, 26, 13, tzinfo=UTC)


def _files() -> list[Path]:
    files = sorted(FIXTURE.rglob("*.parquet"))
    assert len(files) == 3  # acme's and zeta's history of 10:00, a live segment of 11:00
    return files


def test_yesterdays_files_have_todays_schema_and_the_documented_columns():
    documented = DOCS.read_text()
    for path in _files():
        schema = pq.read_schema(path)
        assert schema.remove_metadata().equals(ARCHIVE_SCHEMA), path
    for field in ARCHIVE_SCHEMA:  # every column is in the documentation, with its type
        assert f"| `{field.name}` | `{field.type}` |" in documented, field.name


def test_yesterdays_files_read_back_through_the_marker_protocol(tmp_path):
    store_root = tmp_path / "objects"
    shutil.copytree(FIXTURE, store_root)
    store = LocalObjectStore(store_root)
    acme = read_archive(store, START, END, "acme").to_pylist()
    assert [(r["event"], r["client_id"], r["topic"]) for r in acme] == [
        ("client.connected", "dev-1", None),
        ("session.subscribed", "dev-1", "sensors/#"),
        ("message.publish", "dev-1", "bin/1"),
        ("message.publish", "dev-1", "sensors/1/temp"),
        ("message.publish", "dev-2", "state"),
        ("client.disconnected", "dev-1", None),
        ("message.publish", "dev-1", "late/1"),  # still a live segment (LZ4)
    ]
    first = acme[2]
    assert first["payload"] == bytes(range(256)) and first["qos"] == 1
    assert first["ts"] == datetime(2026, 11, 26, 10, 0, 1, 1000, tzinfo=UTC)
    assert first["user_properties"] == [
        {"key": "k", "value": "v1"},
        {"key": "k", "value": "v2"},
        {"key": "unit", "value": "°C"},
    ]
    assert (first["content_type"], first["correlation_data"]) == (
        "application/octet-stream",
        b"\x00\x01corr\xff",
    )
    assert (first["response_topic"], first["message_expiry"], first["payload_format"]) == (
        "replies/acme",
        3600,
        0,
    )
    assert first["username"] == "acme/d"
    assert acme[4]["retain"] is True and acme[4]["payload"] == b""
    connected = acme[0]
    assert (connected["peer"], connected["proto_ver"], connected["keepalive"]) == (
        "127.0.0.1:50000",
        5,
        30,
    )
    assert connected["clean_start"] is True and connected["session_expiry"] == 120
    assert acme[5]["reason"] == "normal"
    zeta = read_archive(store, START, END, "zeta").to_pylist()
    assert [(r["topic"], r["payload"], r["qos"]) for r in zeta] == [
        ("sensors/1/temp", b"other tenant", 2)
    ]


def test_any_parquet_reader_reads_them():
    pattern = f"{FIXTURE}/archive/tenant=*/*/*/*.parquet"
    rows = duckdb.sql(
        "SELECT tenant, topic, payload, user_properties[3].value AS unit "
        f"FROM read_parquet('{pattern}') WHERE event = 'message.publish' ORDER BY ts"
    ).fetchall()
    assert rows == [
        ("acme", "bin/1", bytes(range(256)), "°C"),
        ("acme", "sensors/1/temp", b'{"t": 21.5}', None),
        ("zeta", "sensors/1/temp", b"other tenant", None),
        ("acme", "state", b"", None),
    ]
    live = next(p for p in _files() if "/live/" in str(p))
    assert pq.read_table(live).column("payload").to_pylist() == [b"live"]

"""The archive's files, without a broker: Parquet segments partitioned by hour in S3 (moto
server), readers per the marker protocol, compaction (also interrupted at every step), version 1
NDJSON segments, bounded buffering while the store is down, and the NDJSON writer billing's usage
records still use."""

import json
import uuid
from datetime import UTC, datetime, timedelta

import boto3
import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.archive.files import (
    archive_files,
    compact_due,
    compact_hour,
    hours_due,
    read_archive,
    read_manifest,
)
from common.archive.schema import COMPACTED_MARKER, EVENT_CONNECTED, EVENT_PUBLISH
from common.stores.object_store import open_object_store
from data_plane.broker.message import Message
from data_plane.storage.archive_columns import publish_columns
from data_plane.storage.parquet_archive import ParquetArchiveWriter
from tests.storage.ndjson_v1 import NdjsonSegmentWriter

HOUR = datetime(2023, 11, 14, 22, tzinfo=UTC)  # 22:00-23:00 UTC
T0 = HOUR.timestamp() + 13 * 60  # 22:13


@pytest.fixture
def s3_store(s3_endpoint):
    bucket = f"archive-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    return open_object_store(f"s3://{bucket}/mqtt")


def publish(tenant, topic, payload, ts, *, client="c1", device="d", qos=0, props=None):
    message = Message.from_publish(tenant, client, topic, payload, qos, False, props or {}, device)
    return (ts, message)


def write(store, batch, events=(), *, writer_id="w1", enabled_for=None):
    writer = ParquetArchiveWriter(store, writer_id=writer_id)
    writer.encode(publish_columns(list(batch)), list(events), enabled_for)
    writer.upload_pending()
    return writer


def window(hours_before=2, hours_after=3):
    return HOUR - timedelta(hours=hours_before), HOUR + timedelta(hours=hours_after)


def rows_of(table):
    return [(r["tenant"], r["topic"], r["payload"]) for r in table.to_pylist()]


def test_segments_are_parquet_partitioned_by_hour_in_arrival_order(s3_store, tmp_path):
    batch = [
        publish("zeta", "t/1", b"z1", T0),
        publish("acme", "t/1", b"a1", T0 + 1, props={"user_property": [("k", "v")]}),
        publish("acme", "t/2", b"\xff\x00", T0 + 3600),  # the next hour
        publish("off", "t/1", b"secret", T0 + 2),
        publish("acme", "t/3", b"a3", T0 + 2),
    ]
    event = {
        "event": EVENT_CONNECTED,
        "tenant": "acme",
        "ts": int(T0 * 1000) + 1500,
        "client_id": "c1",
        "peer": "127.0.0.1:5555",
        "proto_ver": 5,
    }
    writer = write(s3_store, batch, [event], enabled_for=lambda tenant: tenant != "off")
    assert writer.written_records == 5 and writer.pending_bytes == 0
    assert s3_store.list("archive/") == [
        "archive/live/date=2023-11-14/hour=22/w1-0000000001.parquet",
        "archive/live/date=2023-11-14/hour=23/w1-0000000002.parquet",
    ]
    first = pq.read_table(
        pa.BufferReader(s3_store.get("archive/live/date=2023-11-14/hour=22/w1-0000000001.parquet"))
    )
    # In arrival order, tenants interleaved (the broker does not sort; compaction does), the
    # batch's lifecycle rows after its publishes; the tenant whose archive is off: absent.
    assert [(r["tenant"], r["topic"], r["event"]) for r in first.to_pylist()] == [
        ("zeta", "t/1", EVENT_PUBLISH),
        ("acme", "t/1", EVENT_PUBLISH),
        ("acme", "t/3", EVENT_PUBLISH),
        ("acme", None, EVENT_CONNECTED),
    ]
    assert first.to_pylist()[1]["user_properties"] == [{"key": "k", "value": "v"}]
    assert first.to_pylist()[1]["username"] == "acme/d"
    acme = read_archive(s3_store, *window(), "acme", [EVENT_PUBLISH])
    assert rows_of(acme) == [
        ("acme", "t/1", b"a1"),
        ("acme", "t/3", b"a3"),
        ("acme", "t/2", b"\xff\x00"),
    ]
    # An hour at a time, and DuckDB on the same bytes.
    one_hour = read_archive(s3_store, HOUR + timedelta(hours=1), HOUR + timedelta(hours=2))
    assert rows_of(one_hour) == [("acme", "t/2", b"\xff\x00")]
    local = tmp_path / "segment.parquet"
    local.write_bytes(s3_store.get("archive/live/date=2023-11-14/hour=22/w1-0000000001.parquet"))
    assert duckdb.sql(
        f"SELECT tenant, count(*) FROM read_parquet('{local}') GROUP BY tenant ORDER BY tenant"
    ).fetchall() == [("acme", 3), ("zeta", 1)]


def _three_segments(store):
    write(store, [publish("acme", "a", b"1", T0), publish("zeta", "z", b"1", T0)], writer_id="w1")
    write(store, [publish("acme", "a", b"2", T0 + 60)], writer_id="w2")
    write(
        store,
        [publish("zeta", "z", b"2", T0 + 120), publish("acme", "a", b"3", T0 + 120)],
        writer_id="w4",
    )
    write(store, [publish("acme", "next", b"open hour", T0 + 3600)], writer_id="w3")


def test_compaction_moves_a_closed_hour_into_per_tenant_history(s3_store):
    _three_segments(s3_store)
    before = {t: rows_of(read_archive(s3_store, *window(), t)) for t in ("acme", "zeta")}
    assert hours_due(s3_store, now=HOUR + timedelta(minutes=62)) == []  # closed 2 minutes ago
    assert hours_due(s3_store, now=HOUR + timedelta(minutes=70)) == [HOUR]
    [result] = compact_due(s3_store, now=HOUR + timedelta(minutes=70))
    assert (result.segments, result.rows, result.deleted) == (3, 5, 3)
    keys = s3_store.list("archive/")
    assert keys == [
        f"archive/live/date=2023-11-14/hour=22/{COMPACTED_MARKER}",
        "archive/live/date=2023-11-14/hour=23/w3-0000000001.parquet",  # open hour: untouched
        "archive/tenant=acme/date=2023-11-14/hour=22/part-0000-0000.parquet",
        "archive/tenant=zeta/date=2023-11-14/hour=22/part-0000-0000.parquet",
    ]
    history = pq.read_table(
        pa.BufferReader(
            s3_store.get("archive/tenant=acme/date=2023-11-14/hour=22/part-0000-0000.parquet")
        )
    )
    assert history["payload"].to_pylist() == [b"1", b"2", b"3"]  # one tenant, time order
    assert {t: rows_of(read_archive(s3_store, *window(), t)) for t in before} == before
    files = archive_files(s3_store, HOUR, HOUR + timedelta(hours=1), "zeta")
    assert [(f.key, f.shared) for f in files] == [
        ("archive/tenant=zeta/date=2023-11-14/hour=22/part-0000-0000.parquet", False)
    ]
    again = compact_hour(s3_store, "2023-11-14", 22)  # nothing left to do
    assert (again.segments, again.deleted) == (0, 0)
    assert {t: rows_of(read_archive(s3_store, *window(), t)) for t in before} == before


def test_compaction_sorts_a_segments_interleaved_tenants_by_time(s3_store):
    """Live segments hold tenants interleaved, lifecycle rows after the batch's publishes; each
    tenant's history comes out in time order, the connection in its place."""
    connected = {
        "event": EVENT_CONNECTED,
        "tenant": "acme",
        "ts": int(T0 * 1000) + 1500,
        "client_id": "c1",
    }
    batch = [publish(t, "x", b"%d" % n, T0 + n) for n in range(4) for t in ("zeta", "acme")]
    write(s3_store, batch, [connected])
    compact_hour(s3_store, HOUR)
    for tenant in ("acme", "zeta"):
        key = f"archive/tenant={tenant}/date=2023-11-14/hour=22/part-0000-0000.parquet"
        rows = pq.read_table(pa.BufferReader(s3_store.get(key))).to_pylist()
        assert {r["tenant"] for r in rows} == {tenant}
        assert [r["ts"] for r in rows] == sorted(r["ts"] for r in rows)
        expected = [b"0", b"1", None, b"2", b"3"] if tenant == "acme" else [b"0", b"1", b"2", b"3"]
        assert [r["payload"] for r in rows] == expected


def test_a_late_segment_is_read_and_compacted_in_a_second_round(s3_store):
    _three_segments(s3_store)
    compact_hour(s3_store, HOUR)
    write(s3_store, [publish("acme", "a", b"late", T0 + 300)], writer_id="w9")  # uploaded late
    assert [r[2] for r in rows_of(read_archive(s3_store, *window(), "acme"))] == [
        b"1",
        b"2",
        b"3",
        b"late",
        b"open hour",
    ]
    result = compact_hour(s3_store, HOUR)
    assert (result.segments, result.rows) == (1, 1)
    assert read_manifest(s3_store, HOUR).parts == [
        "archive/tenant=acme/date=2023-11-14/hour=22/part-0000-0000.parquet",
        "archive/tenant=zeta/date=2023-11-14/hour=22/part-0000-0000.parquet",
        "archive/tenant=acme/date=2023-11-14/hour=22/part-0001-0000.parquet",
    ]
    assert [r[2] for r in rows_of(read_archive(s3_store, *window(), "acme"))] == [
        b"1",
        b"2",
        b"3",
        b"late",
        b"open hour",
    ]


class Crash(Exception):
    pass


class CrashingStore:
    """The store, failing at the n-th write (put or delete) like a process killed there."""

    def __init__(self, inner, crash_at):
        self.inner, self.crash_at, self.writes, self.url = inner, crash_at, 0, inner.url

    def _step(self):
        self.writes += 1
        if self.writes == self.crash_at:
            raise Crash(f"killed at write {self.writes}")

    def put(self, key, data):
        self._step()
        self.inner.put(key, data)

    def delete(self, key):
        self._step()
        self.inner.delete(key)

    def get(self, key):
        return self.inner.get(key)

    def list(self, prefix=""):
        return self.inner.list(prefix)


def test_compaction_interrupted_at_every_step_never_loses_or_doubles_a_row(tmp_path):
    # Writes of one run: 2 parts, the marker, 3 deletions. Kill it at each, read, then re-run.
    reference = None
    for crash_at in range(1, 7):
        store = open_object_store(f"file://{tmp_path}/run-{crash_at}")
        _three_segments(store)
        expected = {t: rows_of(read_archive(store, *window(), t)) for t in ("acme", "zeta")}
        reference = reference or expected
        assert expected == reference
        with pytest.raises(Crash):
            compact_hour(CrashingStore(store, crash_at), HOUR)
        assert {t: rows_of(read_archive(store, *window(), t)) for t in expected} == expected
        compact_hour(store, HOUR)  # the next scheduled run finishes the job
        assert {t: rows_of(read_archive(store, *window(), t)) for t in expected} == expected
        live = store.list("archive/live/date=2023-11-14/hour=22/")
        assert live == [f"archive/live/date=2023-11-14/hour=22/{COMPACTED_MARKER}"], crash_at
        assert read_manifest(store, HOUR).rows == 5
    store = open_object_store(f"file://{tmp_path}/whole")
    _three_segments(store)
    whole = CrashingStore(store, crash_at=7)
    compact_hour(whole, HOUR)
    assert whole.writes == 6  # so the loop above killed it at every write there is


def test_version_1_ndjson_segments_stay_readable(s3_store):
    v1 = NdjsonSegmentWriter(s3_store, dataset="archive", writer_id="old")
    lines = [
        {
            "tenant": "acme",
            "topic": "t/1",
            "qos": 1,
            "retain": False,
            "client_id": "c1",
            "ts": int(T0 * 1000),
            "payload": "hello",
            "payload_b64": None,
            "properties": {"user_property": [["k", "v"]], "content_type": "text/plain"},
        },
        {
            "tenant": "acme",
            "topic": "t/2",
            "qos": 0,
            "retain": True,
            "client_id": "c1",
            "ts": int(T0 * 1000) + 5,
            "payload": None,
            "payload_b64": "/wA=",
            "properties": {"correlation_data": "AAE="},
        },
    ]
    for line in lines:
        v1.append(line)
    v1.flush(force=True)
    assert s3_store.list("archive/") == [
        "archive/tenant=acme/date=2023-11-14/hour=22/old-00000001.ndjson.gz"
    ]
    write(s3_store, [publish("acme", "t/3", b"v2", T0 + 10)])  # a Parquet segment beside it
    rows = read_archive(s3_store, *window(), "acme").to_pylist()
    assert [(r["topic"], r["payload"], r["retain"]) for r in rows] == [
        ("t/1", b"hello", False),
        ("t/2", b"\xff\x00", True),
        ("t/3", b"v2", False),
    ]
    assert rows[0]["user_properties"] == [{"key": "k", "value": "v"}]
    assert rows[0]["content_type"] == "text/plain" and rows[1]["correlation_data"] == b"\x00\x01"
    compact_hour(s3_store, HOUR)  # compaction leaves version 1 files as they are, still read
    assert [r["topic"] for r in read_archive(s3_store, *window(), "acme").to_pylist()] == [
        "t/1",
        "t/2",
        "t/3",
    ]


class FlakyStore:
    def __init__(self, inner):
        self.inner, self.up, self.url = inner, False, inner.url

    def put(self, key, data):
        if not self.up:
            raise ConnectionError("object store down")
        self.inner.put(key, data)

    def get(self, key):
        return self.inner.get(key)

    def delete(self, key):
        self.inner.delete(key)

    def list(self, prefix=""):
        return self.inner.list(prefix)


def test_parquet_writer_buffers_within_its_bound_while_the_store_is_down(tmp_path):
    store = FlakyStore(open_object_store(f"file://{tmp_path}"))
    writer = ParquetArchiveWriter(store, writer_id="w", max_pending_bytes=20_000)
    total = 0
    for batch in range(30):  # one encoded segment per interval, each of random-ish payloads
        rows = [
            publish("acme", "t", uuid.uuid4().bytes * 8, T0 + batch + i / 100) for i in range(50)
        ]
        total += len(rows)
        writer.encode(publish_columns(rows), [], None)
        assert writer.upload_pending() == 0
        assert writer.pending_bytes <= 20_000 or len(writer._pending) == 1
    assert writer.upload_failures == 30 and writer.dropped_records > 0
    store.up = True
    uploaded = writer.upload_pending()
    assert writer.pending_bytes == 0
    assert uploaded + writer.dropped_records == total
    kept = read_archive(store, *window()).num_rows
    assert kept == uploaded == writer.written_records


def test_compact_archive_command_and_periodic_task(tmp_path, monkeypatch, db):
    # `db`: the control plane compacts under its archive lock (a Postgres advisory lock).
    import io

    from django.core.management import call_command
    from django.core.management.base import CommandError

    from tenants.tasks import compact_archive

    monkeypatch.setenv("OBJECT_STORE_URL", f"file://{tmp_path}")
    store = open_object_store()
    _three_segments(store)
    out = io.StringIO()
    call_command("compact_archive", "--hour", "2023-11-14T22", stdout=out)
    report = json.loads(out.getvalue())
    assert report["rows"] == 5 and report["hours"][0]["hour"] == "2023-11-14T22:00:00+00:00"
    assert read_manifest(store, HOUR).rows == 5
    for bad, problem in (("yesterday", "not an ISO 8601"), ("2999-01-01T00", "not over yet")):
        with pytest.raises(CommandError, match=problem):
            call_command("compact_archive", "--hour", bad, stdout=io.StringIO())
    # The beat task: every closed hour (here 23:00, long over), once.
    assert compact_archive() == [
        {
            "hour": "2023-11-14T23:00:00+00:00",
            "segments": 1,
            "rows": 1,
            "parts": 1,
            "deleted": 1,
        }
    ]
    assert compact_archive() == []
    assert [r[2] for r in rows_of(read_archive(store, *window(), "acme"))] == [
        b"1",
        b"2",
        b"3",
        b"open hour",
    ]

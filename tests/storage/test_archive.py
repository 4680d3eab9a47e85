"""Archive segments land in S3 (moto server), partitioned by tenant and hour, and read back."""

import uuid

import boto3
import pytest

from data_plane.storage.archive import ArchiveWriter, archive_record, read_segment
from common.object_store import open_object_store


@pytest.fixture
def s3_store(s3_endpoint):
    bucket = f"archive-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    return open_object_store(f"s3://{bucket}/mqtt")


def test_records_round_trip_partitioned_by_tenant_and_hour(s3_store):
    writer = ArchiveWriter(s3_store, writer_id="w1")
    ts = 1_700_000_000.0  # 2023-11-14 22:13 UTC
    published = [
        archive_record(
            tenant="acme",
            topic="t/1",
            qos=1,
            retain=False,
            payload=b"hello",
            client_id="c1",
            properties={"user_property": [["k", "v"]]},
            ts=ts,
        ),
        archive_record(
            tenant="acme",
            topic="t/2",
            qos=0,
            retain=True,
            payload=b"\xff\x00",
            client_id="c1",
            ts=ts + 3600,
        ),
        archive_record(
            tenant="other", topic="t/1", qos=2, retain=False, payload=b"x", client_id="c9", ts=ts
        ),
    ]
    for record in published:
        writer.append(record)
    assert writer.flush(force=True) == 3
    keys = s3_store.list("archive/")
    assert keys == [
        "archive/tenant=acme/date=2023-11-14/hour=22/w1-00000001.ndjson.gz",
        "archive/tenant=acme/date=2023-11-14/hour=23/w1-00000002.ndjson.gz",
        "archive/tenant=other/date=2023-11-14/hour=22/w1-00000003.ndjson.gz",
    ]
    first = read_segment(s3_store.get(keys[0]))
    assert first == [published[0]]
    assert first[0]["payload"] == "hello" and first[0]["properties"]["user_property"] == [
        ["k", "v"]
    ]
    binary = read_segment(s3_store.get(keys[1]))[0]
    assert binary["payload"] is None and binary["payload_b64"] == "/wA="


def test_segment_closes_by_size(tmp_path):
    store = open_object_store(f"file://{tmp_path}")
    writer = ArchiveWriter(store, writer_id="w", max_bytes=1000, max_age=3600)
    for i in range(30):
        writer.append(
            archive_record(
                tenant="acme",
                topic="t",
                qos=0,
                retain=False,
                payload=b"p" * 100,
                client_id="c",
                ts=1_700_000_000 + i,
            )
        )
    writer.flush()
    assert len(store.list()) >= 2  # size-closed segments were uploaded without force
    writer.flush(force=True)
    total = sum(len(read_segment(store.get(k))) for k in store.list())
    assert total == 30


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


def test_store_outage_buffers_within_bound_then_recovers(tmp_path):
    store = FlakyStore(open_object_store(f"file://{tmp_path}"))
    writer = ArchiveWriter(store, writer_id="w", max_bytes=200, max_pending_bytes=2000)
    for i in range(200):
        writer.append(
            archive_record(
                tenant="acme",
                topic="t",
                qos=0,
                retain=False,
                payload=str(i).encode() * 20,
                client_id="c",
                ts=1_700_000_000,
            )
        )
    writer.flush(force=True)
    assert writer.upload_failures >= 1
    assert writer.pending_bytes <= 2000
    assert writer.dropped_records > 0
    store.up = True
    uploaded = writer.flush()
    assert writer.pending_bytes == 0
    assert uploaded + writer.dropped_records == 200
    assert sum(len(read_segment(store.get(k))) for k in store.list()) == uploaded

"""The S3 sink against moto's S3: objects per hour named by outbox ids, read back as a user
reads them; a bucket that is not there, an endpoint down or refused, in words."""

from __future__ import annotations

import io
import json
import uuid

import pyarrow.parquet as pq
import pytest

from common.sinks import check_action, writer_for
from tests.sinks.conftest import HOUR_MS, T0, free_port, record


@pytest.fixture
def bucket(boto) -> str:
    name = f"tenant-{uuid.uuid4().hex[:8]}"
    boto("s3").create_bucket(Bucket=name)
    return name


def _objects(boto, bucket: str) -> dict[str, bytes]:
    s3 = boto("s3")
    listed = s3.list_objects_v2(Bucket=bucket).get("Contents", [])
    return {o["Key"]: s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def test_jsonl_objects_per_hour_named_by_outbox_ids_and_a_retry_overwrites(aws, boto, bucket):
    action = {"type": "s3", "bucket": bucket, "prefix": "telemetry/", "format": "jsonl", **aws}
    records = [
        record(7, {"t": 1}, ts_ms=T0 + 10),
        record(8, {"t": 2, "s": "é\n"}, ts_ms=T0 + 20),
        record(9, {"t": 3}, ts_ms=T0 + HOUR_MS + 5),  # the next hour
    ]
    writer = writer_for(action, "acme")
    try:
        results = [writer.send(records) for _ in range(2)][-1]  # a retry: the same records
    finally:
        writer.close()
    assert [(r.ok, r.error) for r in results] == [(True, None)] * 3
    objects = _objects(boto, bucket)
    assert sorted(objects) == [  # the retry replaced the same two objects
        "telemetry/date=2026-12-07/hour=12/part-00000000000000000007-00000000000000000008.jsonl",
        "telemetry/date=2026-12-07/hour=13/part-00000000000000000009-00000000000000000009.jsonl",
    ]
    first, second = (objects[k].decode().splitlines() for k in sorted(objects))
    assert [json.loads(line) for line in first] == [{"t": 1}, {"t": 2, "s": "é\n"}]
    assert first[0] == records[0].body and [json.loads(line) for line in second] == [{"t": 3}]


def test_parquet_rows_carry_id_key_time_and_the_output(aws, boto, bucket):
    action = {"type": "s3", "bucket": bucket, "format": "parquet", **aws}
    records = [record(1, {"a": {"b": [1, 2]}}, key="pump-1"), record(2, {"x": None}, key="p2")]
    writer = writer_for(action, "acme")
    assert all(r.ok for r in writer.send(records))
    writer.close()
    [(key, body)] = _objects(boto, bucket).items()
    assert key == "date=2026-12-07/hour=12/part-00000000000000000001-00000000000000000002.parquet"
    rows = pq.read_table(io.BytesIO(body)).to_pylist()
    assert [(r["id"], r["key"], int(r["ts"].timestamp() * 1000)) for r in rows] == [
        (1, "pump-1", T0),
        (2, "p2", T0),
    ]
    assert [json.loads(r["output"]) for r in rows] == [{"a": {"b": [1, 2]}}, {"x": None}]


def test_a_bucket_that_is_not_there_is_words_to_retry_and_check_says_so(aws, bucket):
    missing = {"type": "s3", "bucket": "no-such-bucket", "format": "jsonl", **aws}
    writer = writer_for(missing, "acme")
    results = writer.send([record(1, {"t": 1}), record(2, {"t": 2})])
    writer.close()
    assert [(r.ok, r.retry) for r in results] == [(False, True)] * 2
    assert results[0].error == "S3: the bucket 'no-such-bucket' does not exist"
    assert check_action(missing, "acme") == "S3: the bucket 'no-such-bucket' does not exist"
    assert check_action({**missing, "bucket": bucket}, "acme") is None


def test_an_endpoint_down_or_not_allowed_fails_in_words_never_raises(aws, monkeypatch):
    down = {**aws, "endpoint_url": f"http://127.0.0.1:{free_port()}"}
    action = {"type": "s3", "bucket": "b", "format": "jsonl", **down}
    [result] = writer_for(action, "acme").send([record(1, {"t": 1})])
    assert (result.ok, result.retry, result.error) == (
        False,
        True,
        "S3: could not connect to the endpoint",
    )
    monkeypatch.delenv("WEBHOOK_ALLOW")  # loopback no longer allowed by the operator
    words = check_action({"type": "s3", "bucket": "b", **aws}, "acme")
    assert words is not None and "public addresses only" in words and "WEBHOOK_ALLOW" in words
    [result] = writer_for({"type": "s3", "bucket": "b", **aws}, "acme").send([record(1, {})])
    assert not result.ok and result.retry and result.error == words
    assert "sinktest-secret" not in words


def test_settings_a_writer_does_not_take_are_words():
    assert check_action({"type": "s3", "format": "jsonl"}, "acme") == "the s3 action needs 'bucket'"
    assert "'jsonl' or 'parquet'" in check_action(
        {"type": "s3", "bucket": "b", "format": "csv"}, "t"
    )
    assert "both" in check_action({"type": "s3", "bucket": "b", "access_key_id": "k"}, "t")

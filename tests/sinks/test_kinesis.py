"""The Kinesis sink against moto's Kinesis: records read back with GetRecords in order under
their partition keys; a record Kinesis cannot take fails alone; a stream not there, in words; a
far end answering as Kinesis does under throttling (FailedRecordCount): only those retried."""

from __future__ import annotations

import json
import uuid

import pytest

from common.sinks import check_action, writer_for
from tests.sinks.conftest import Receiver, record


@pytest.fixture
def stream(boto) -> str:
    name = f"s-{uuid.uuid4().hex[:8]}"
    kinesis = boto("kinesis")
    kinesis.create_stream(StreamName=name, ShardCount=1)
    kinesis.get_waiter("stream_exists").wait(StreamName=name, WaiterConfig={"Delay": 0.1})
    return name


def _read(kinesis, stream: str) -> list[tuple[str, str]]:
    shard = kinesis.list_shards(StreamName=stream)["Shards"][0]["ShardId"]
    iterator = kinesis.get_shard_iterator(
        StreamName=stream, ShardId=shard, ShardIteratorType="TRIM_HORIZON"
    )["ShardIterator"]
    records = kinesis.get_records(ShardIterator=iterator, Limit=1000)["Records"]
    return [(r["PartitionKey"], r["Data"].decode()) for r in records]


def test_records_land_in_order_under_the_partition_key_template(aws, boto, stream):
    action = {"type": "kinesis", "stream": stream, "partition_key": "${payload.site}", **aws}
    records = [record(i, {"payload": {"site": f"site-{i % 2}"}, "n": i}) for i in range(1, 21)]
    records.append(record(21, {"n": 21}, key="pump-9"))  # renders `undefined`, as EMQX does
    writer = writer_for(action, "acme")
    assert all(r.ok for r in writer.send(records))
    writer.close()
    got = _read(boto("kinesis"), stream)
    assert got == [(f"site-{i % 2}", records[i - 1].body) for i in range(1, 21)] + [
        ("undefined", records[20].body)
    ]
    # Without a template the partition key is the record's key (the publisher's client id).
    writer = writer_for({"type": "kinesis", "stream": stream, **aws}, "acme")
    assert writer.send([record(22, {"n": 22}, key="acme/pump-1")])[0].ok
    assert _read(boto("kinesis"), stream)[-1] == ("acme/pump-1", '{"n":22}')


def test_a_record_over_kinesis_limit_fails_alone_and_for_good(aws, boto, stream):
    records = [record(1, {"n": 1}), record(2, {"big": "x" * (1 << 20)}), record(3, {"n": 3})]
    results = writer_for({"type": "kinesis", "stream": stream, **aws}, "acme").send(records)
    assert [(r.ok, r.retry) for r in results] == [(True, True), (False, False), (True, True)]
    assert results[1].error is not None and "over Kinesis's 1 MiB" in results[1].error
    assert [data for _, data in _read(boto("kinesis"), stream)] == ['{"n":1}', '{"n":3}']


def test_a_stream_that_is_not_there_is_words_and_check_says_so(aws, stream):
    action = {"type": "kinesis", "stream": "nope", **aws}
    results = writer_for(action, "acme").send([record(1, {}), record(2, {})])
    assert [(r.ok, r.retry) for r in results] == [(False, True)] * 2
    assert results[0].error == "Kinesis: the stream 'nope' does not exist"
    assert check_action(action, "acme") == results[0].error
    assert check_action({**action, "stream": stream}, "acme") is None


def test_only_the_records_kinesis_failed_are_retried():
    """A far end that answers PutRecords as Kinesis does when a shard is over its rate (moto
    never throttles): record 2 of 3 failed."""
    far_end = Receiver(
        answer={
            "FailedRecordCount": 1,
            "Records": [
                {"SequenceNumber": "1", "ShardId": "shardId-000000000000"},
                {
                    "ErrorCode": "ProvisionedThroughputExceededException",
                    "ErrorMessage": "Rate exceeded for shard shardId-000000000000",
                },
                {"SequenceNumber": "2", "ShardId": "shardId-000000000000"},
            ],
        }
    )
    try:
        action = {
            "type": "kinesis",
            "stream": "s",
            "endpoint_url": f"http://127.0.0.1:{far_end.port}",
            "access_key_id": "k-id",
            "secret_access_key": "k-secret",
        }
        records = [record(1, {"n": 1}), record(2, {"n": 2}), record(3, {"n": 3})]
        results = writer_for(action, "acme").send(records)
        [call] = far_end.calls
    finally:
        far_end.close()
    assert [(r.ok, r.retry) for r in results] == [(True, True), (False, True), (True, True)]
    assert results[1].error == (
        "Kinesis: the stream refused 1 of 3 records (ProvisionedThroughputExceededException: "
        "Rate exceeded for shard shardId-000000000000)"
    )
    sent = json.loads(call["body"])
    assert [e["PartitionKey"] for e in sent["Records"]] == ["dev-1"] * 3
    assert call["headers"]["X-Amz-Target"] == "Kinesis_20131202.PutRecords"

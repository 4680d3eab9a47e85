"""The Kinesis Data Streams sink: PutRecords, up to 500 records and 5 MiB a call (Kinesis's
limits; a larger send is split into such calls). A record over 1 MiB (data and key) would make
Kinesis refuse the whole call: it is left out alone, a permanent failure.

Each record's data is its output's JSON text; its partition key is the action's `partition_key`
template (`${payload.device}`, say) rendered from the output, or the record's key (the
publisher's client id) without one. A key renders to at most 256 characters (Kinesis's limit:
longer ones are cut there) and an empty one falls back to the record's key. Records of one
partition key go to one shard, in the order of the call.

Kinesis answers per record (`FailedRecordCount`, an `ErrorCode` on each failed one): only those
records fail here, to be retried; the rest are written. A retried record lands after records of
its key that were written in the same call: that is Kinesis's own ordering caveat for
PutRecords, and it is counted as the outbox counts any retry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from common.rules import render_template
from common.sinks.aws import Aws
from common.sinks.base import Record, Result, key_ordered, optional, setting

MAX_RECORDS = 500
MAX_BYTES = 5 << 20
MAX_KEY = 256
MAX_RECORD = 1 << 20  # data and partition key


class KinesisWriter:
    def __init__(self, action: dict[str, Any], tenant: str) -> None:
        self.stream = setting(action, "stream")
        self.template = optional(action, "partition_key")
        self.aws = Aws("kinesis", action, optional(action, "endpoint_url"))
        self.tenant = tenant
        self._refused = {
            "ResourceNotFoundException": f"the stream '{self.stream}' does not exist",
        }

    def partition_key(self, record: Record) -> str:
        key = render_template(self.template, record.output) if self.template else ""
        return (key or record.key or "-")[:MAX_KEY]

    def send(self, records: Sequence[Record]) -> list[Result]:
        entries: dict[int, dict[str, Any]] = {}
        keys: dict[int, str] = {}  # record id -> its partition key (rendered once)
        too_large: dict[int, Result] = {}
        chunks: list[list[int]] = []
        chunk: list[int] = []
        size = 0
        for index, record in enumerate(records):
            data = record.body.encode("utf-8", "surrogatepass")
            key = keys[record.id] = self.partition_key(record)
            length = len(data) + len(key.encode("utf-8", "surrogatepass"))
            if length > MAX_RECORD:  # Kinesis refuses the whole call for it: left out alone
                too_large[index] = Result(
                    False, f"Kinesis: the record is {length} bytes, over Kinesis's 1 MiB", False
                )
                continue
            if chunk and (len(chunk) == MAX_RECORDS or size + length > MAX_BYTES):
                chunks.append(chunk)
                chunk, size = [], 0
            chunk.append(index)
            entries[index] = {"Data": data, "PartitionKey": key}
            size += length
        if chunk:
            chunks.append(chunk)
        put = lambda c, results: self._put(records, c, [entries[i] for i in c], results)  # noqa: E731
        results = key_ordered(records, chunks, put, lambda r: keys[r.id])  # per partition key
        for index, refusal in too_large.items():
            results[index] = refusal
        return results

    def _put(
        self,
        records: Sequence[Record],
        chunk: list[int],
        entries: list[dict[str, Any]],
        results: list[Result],
    ) -> None:
        try:
            answer = self.aws.client().put_records(StreamName=self.stream, Records=entries)
        except Exception as exc:
            refusal = Result(False, f"Kinesis: {self.aws.words(exc, self._refused)}")
            for i in chunk:
                results[i] = refusal
            return
        outcomes = answer.get("Records") or []
        if not answer.get("FailedRecordCount"):
            return
        if len(outcomes) != len(chunk):  # an answer that does not say which: all again
            for i in chunk:
                results[i] = Result(False, "Kinesis: the answer did not say which were written")
            return
        failures = answer["FailedRecordCount"]
        for i, outcome in zip(chunk, outcomes, strict=True):
            code = outcome.get("ErrorCode")
            if code:
                message = str(outcome.get("ErrorMessage") or "").strip()
                why = f"{code}: {message}" if message else str(code)
                error = f"Kinesis: the stream refused {failures} of {len(chunk)} records ({why})"
                results[i] = Result(False, self.aws.scrub(error))

    def check(self) -> str | None:
        """The stream exists and is active (DescribeStreamSummary)."""
        try:
            answer = self.aws.client().describe_stream_summary(StreamName=self.stream)
        except Exception as exc:
            return f"Kinesis: {self.aws.words(exc, self._refused)}"
        status = answer.get("StreamDescriptionSummary", {}).get("StreamStatus")
        if status not in ("ACTIVE", "UPDATING"):
            return f"Kinesis: the stream '{self.stream}' is {str(status).lower()}, not active"
        return None

    def close(self) -> None:
        self.aws.close()

"""The S3 sink: a send's records as objects in the tenant's bucket (any S3 endpoint).

One object per send per hour of the records' archive time (UTC), so the bucket is partitioned
the way Athena, Spark and Glue read it:

    {prefix}/date=YYYY-MM-DD/hour=HH/part-{first id:020d}-{last id:020d}.jsonl|.parquet

The name is made of the outbox ids of the first and last record in it, not of a clock or a
random id: a send retried after a crash (or after a lost answer) writes the same object again,
replacing it, so the bucket never holds the same records twice under two names. (The outbox
re-sends the same records, so the retry has the same name.)

Formats:
- `jsonl`: each record's output, its exact JSON text, one per line (`application/x-ndjson`);
- `parquet`: one row per record with the columns `id` (int64, the outbox id), `key` (string, the
  ordering key: the publisher's client id by default), `ts` (timestamp ms, UTC: the message's
  archive time) and `output` (string: the output's JSON text). The output stays one JSON column
  rather than being flattened into columns of its own: every object of a prefix then has the same
  schema whatever the rule selects (and after the rule changes), so one table reads them all;
  a query takes fields out with `json_extract` / `get_json_object`.

Nothing in a record makes S3 refuse it, so every failure is worth retrying (the bucket may be
created, the credentials fixed).
"""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from common.sinks.aws import Aws
from common.sinks.base import OK, Record, Result, optional, setting

FORMATS = {"jsonl": "application/x-ndjson", "parquet": "application/vnd.apache.parquet"}


def object_key(prefix: str, hour: datetime, first: int, last: int, fmt: str) -> str:
    """Where a send's records of one hour land (see the module's docstring)."""
    head = prefix.strip("/")
    name = f"date={hour:%Y-%m-%d}/hour={hour:%H}/part-{first:020d}-{last:020d}.{fmt}"
    return f"{head}/{name}" if head else name


def _hour(ts_ms: int) -> datetime:
    return datetime.fromtimestamp(ts_ms // 1000, UTC).replace(minute=0, second=0)


def _jsonl(records: Sequence[Record]) -> bytes:
    lines = []
    for record in records:
        body = record.body
        if "\n" in body or "\r" in body:  # one line each, whatever text the output came as
            body = json.dumps(json.loads(body), separators=(",", ":"))
        lines.append(body)
    return ("\n".join(lines) + "\n").encode()


def _parquet(records: Sequence[Record]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "id": pa.array([r.id for r in records], pa.int64()),
            "key": pa.array([r.key for r in records], pa.string()),
            "ts": pa.array([r.ts_ms for r in records], pa.timestamp("ms", tz="UTC")),
            "output": pa.array([r.body for r in records], pa.string()),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd")
    return sink.getvalue()


class S3Writer:
    def __init__(self, action: dict[str, Any], tenant: str) -> None:
        self.bucket = setting(action, "bucket")
        self.prefix = optional(action, "prefix") or ""
        self.format = action.get("format") or "jsonl"
        if self.format not in FORMATS:
            raise ValueError(f"the s3 format is 'jsonl' or 'parquet', not {self.format!r}")
        self.aws = Aws("s3", action, optional(action, "endpoint_url"))
        self.tenant = tenant
        self._refused = {
            "NoSuchBucket": f"the bucket '{self.bucket}' does not exist",
            "AccessDenied": f"access to the bucket '{self.bucket}' was denied",
        }

    def send(self, records: Sequence[Record]) -> list[Result]:
        hours: dict[datetime, list[int]] = {}
        for index, record in enumerate(records):
            hours.setdefault(_hour(record.ts_ms), []).append(index)
        results: list[Result] = [OK] * len(records)
        for hour, indexes in hours.items():
            part = [records[i] for i in indexes]
            error = self._put(hour, part)
            if error is not None:
                for i in indexes:
                    results[i] = Result(False, error)
        return results

    def _put(self, hour: datetime, part: Sequence[Record]) -> str | None:
        ids = [r.id for r in part]
        key = object_key(self.prefix, hour, min(ids), max(ids), self.format)
        try:
            body = _parquet(part) if self.format == "parquet" else _jsonl(part)
            self.aws.client().put_object(
                Bucket=self.bucket, Key=key, Body=body, ContentType=FORMATS[self.format]
            )
        except Exception as exc:
            return f"S3: {self.aws.words(exc, self._refused)}"
        return None

    def check(self) -> str | None:
        """The bucket takes a write: a small object (`_connection_test` under the prefix) is
        written, then deleted if the credentials may (a write-only key is enough for a sink)."""
        head = self.prefix.strip("/")
        key = f"{head}/_connection_test" if head else "_connection_test"
        try:
            client = self.aws.client()
            client.put_object(Bucket=self.bucket, Key=key, Body=b"ok")
        except Exception as exc:
            return f"S3: {self.aws.words(exc, self._refused)}"
        try:
            client.delete_object(Bucket=self.bucket, Key=key)
        except Exception:
            pass  # written, which is what the sink needs
        return None

    def close(self) -> None:
        self.aws.close()

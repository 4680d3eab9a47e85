"""Every archived message has one id, whichever form its hour is in (what the action ledger keys
`new-only` runs by): derived from its live segment and position, copied into history by the
compaction, the same through pyarrow and through Spark; history parts compacted before the
column existed (yesterday's files) still read, with ids of their own."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from common.archive.files import (
    Manifest,
    archive_files,
    compact_hour,
    conform,
    decode_parquet,
    encode_parquet,
    read_file_with_ids,
)
from common.archive.schema import (
    ARCHIVE_SCHEMA,
    COMPACTED_MARKER,
    MESSAGE_ID,
    history_part_key,
    live_hour_prefix,
    message_id_prefix,
)
from spark.archive import read_archive
from tests.spark.conftest import message, parquet_bytes, write_live

HOUR = datetime(2026, 3, 1, 10, tzinfo=UTC)
BASE = int(HOUR.timestamp() * 1000)


def ids_by_payload(table) -> dict[bytes, str]:
    return dict(
        zip(table.column("payload").to_pylist(), table.column(MESSAGE_ID).to_pylist(), strict=True)
    )


def pyarrow_ids(store, tenant: str) -> dict[bytes, str]:
    out: dict[bytes, str] = {}
    for file in archive_files(store, HOUR, HOUR + timedelta(hours=1), tenant):
        table = read_file_with_ids(store, file)
        out.update(ids_by_payload(table.filter(pc.equal(table.column("tenant"), tenant))))
    return out


def spark_ids(spark, store, tenant: str) -> dict[bytes, str]:
    end = BASE + 3_600_000
    rows = read_archive(spark, store, [tenant], BASE, end).select("payload", MESSAGE_ID).collect()
    return {bytes(r["payload"]): r[MESSAGE_ID] for r in rows}


def test_ids_survive_compaction_and_agree_between_readers(spark, store):
    # Two brokers' segments, tenants interleaved; the second broker writes out of time order.
    a = write_live(store, [message("acme", "t", f"a{i}", BASE + 10 * i) for i in range(5)], "b-1")
    b = write_live(
        store,
        [message("zeta" if i % 2 else "acme", "t", f"b{i}", BASE + 50 - i) for i in range(6)],
        "b-2",
    )
    live = pyarrow_ids(store, "acme")
    assert live[b"a3"] == f"{message_id_prefix(a)}:3"
    assert live[b"b4"] == f"{message_id_prefix(b)}:4"
    assert len(set(live.values())) == len(live) == 8
    assert spark_ids(spark, store, "acme") == live

    result = compact_hour(store, HOUR)
    assert result.segments == 2 and not store.list("archive/live/date=2026-03-01/hour=10/b-")
    part = pq.read_table(store.root / result.parts[0])
    assert MESSAGE_ID in part.column_names  # stored now, copied before the sort
    assert pyarrow_ids(store, "acme") == live
    assert spark_ids(spark, store, "acme") == live
    assert set(spark_ids(spark, store, "zeta").values()).isdisjoint(live.values())


def test_yesterdays_history_parts_without_ids_still_read(spark, store):
    """A part compacted before the column existed: every reader reads it, ids derived from it."""
    rows = [message("acme", "t", f"old{i}", BASE + i) for i in range(3)]
    key = history_part_key("acme", BASE, 0, 0)
    store.put(key, parquet_bytes(rows))  # ARCHIVE_SCHEMA: no message_id column
    store.put(
        live_hour_prefix(BASE) + COMPACTED_MARKER,
        Manifest(segments=[], parts=[key], rounds=1, rows=3).encode(),
    )
    assert decode_parquet(store.get(key)).schema == ARCHIVE_SCHEMA
    expected = {f"old{i}".encode(): f"{message_id_prefix(key)}:{i}" for i in range(3)}
    assert pyarrow_ids(store, "acme") == expected
    assert spark_ids(spark, store, "acme") == expected
    assert message_id_prefix(key) == "tenant=acme/date=2026-03-01/hour=10/part-0000-0000"


def test_a_history_part_holding_ids_keeps_them_in_every_reader(spark, store):
    table = conform(decode_parquet(parquet_bytes([message("acme", "t", "x", BASE)])))
    table = table.append_column(MESSAGE_ID, pa.array(["b-9-0000000001:7"]))
    key = history_part_key("acme", BASE, 0, 0)
    store.put(key, encode_parquet(table))
    store.put(
        live_hour_prefix(BASE) + COMPACTED_MARKER,
        Manifest(segments=[], parts=[key], rounds=1, rows=1).encode(),
    )
    assert pyarrow_ids(store, "acme") == {b"x": "b-9-0000000001:7"}
    assert spark_ids(spark, store, "acme") == {b"x": "b-9-0000000001:7"}

"""The archive's encoder alone: worker-thread CPU per row for batches like the broker's.

    .venv/bin/python -m bench.archive_encoder [--tenants 1] [--payload filler|json]
        [--compression lz4|none] [--rows 8192] [--batches 60]

Each batch is filled by the recorder the broker runs (the C one where built) with 1 KiB
messages, published round robin by one connection per tenant: `filler` is what bench.loadgen
sends (an 8-byte timestamp, then `x`s: compresses to nothing, in no time), `json` a device's
telemetry (`bench.loadgen.json_bodies`: readings with varied numbers; LZ4 gets about 3.8:1). `--compression`
is the live segments' payload codec (`parquet_archive.live_compression`; the broker runs LZ4).
Each batch is then written by `ParquetArchiveWriter.add` (and sealed every 12 batches, about a
second at 100,000 msg/s) while `time.thread_time` counts; the upload is not measured. Prints the median and quartiles in ns per row. Run it pinned
(`taskset -c 0`) on a quiet machine; compare tenant counts in one sitting.
"""

from __future__ import annotations

import argparse
import struct
import tempfile
import time

from bench.loadgen import json_bodies
from common.stores.object_store import LocalObjectStore
from data_plane.broker.message import Message, Origin
from data_plane.storage.archive_columns import RECORDER, PublishColumns, reusable_columns
from data_plane.storage.parquet_archive import ParquetArchiveWriter, live_compression


def measure(
    tenants: int, rows: int, batches: int, payload_kind: str = "filler", codec: str = "lz4"
) -> list[float]:
    origins = [Origin(f"tenant-{i:03d}", f"c{i}", "d") for i in range(tenants)]
    bodies = json_bodies(1024) if payload_kind == "json" else [b"x" * 1016]
    messages = []
    for i in range(rows):
        origin = origins[i % tenants]
        # As bench.loadgen sends them: an 8-byte timestamp, then the body.
        payload = struct.pack("d", time.time()) + bodies[i % len(bodies)]
        messages.append(
            Message.from_publish(
                origin.tenant,
                origin.client_id,
                f"bench/pairs/{i % 100}",
                payload,
                0,
                False,
                {},
                "d",
                origin,
            )
        )
    writer = ParquetArchiveWriter(
        LocalObjectStore(tempfile.mkdtemp(prefix="bench-encoder-")),
        compression=live_compression(codec),
    )
    writer.warm_up()
    reused, per_row = None, []
    for batch in range(batches):
        columns = PublishColumns(reused)
        record = columns.recorder()
        for message in messages:
            record(message)
        started = time.thread_time_ns()
        writer.add(columns, [], lambda tenant: True)
        if batch % 12 == 11:
            writer.seal()
            writer._pending.clear()  # not uploaded: the store is not what is measured
            writer._pending_bytes = 0
        per_row.append((time.thread_time_ns() - started) / rows)
        reused = reusable_columns(columns)
    return sorted(per_row)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tenants", type=int, default=1)
    parser.add_argument("--payload", choices=["filler", "json"], default="filler")
    parser.add_argument("--compression", choices=["lz4", "none"], default="lz4")
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--batches", type=int, default=60)
    args = parser.parse_args(argv)
    per_row = measure(args.tenants, args.rows, args.batches, args.payload, args.compression)
    n = len(per_row)
    print(
        f"encoder ({RECORDER} recorder), {args.tenants} tenant(s), {args.payload} payloads "
        f"({args.compression}), "
        f"{args.rows:,}-row batches: "
        f"median {per_row[n // 2]:.0f} ns/row (quartiles {per_row[n // 4]:.0f}–"
        f"{per_row[3 * n // 4]:.0f})"
    )


if __name__ == "__main__":
    main()

"""What storing a KiB of payload costs, each piece alone: the floor under the archive's target.

    .venv/bin/python -m bench.payload_codecs [--payload json|filler] [--mib 1] [--repeat 15]

Compresses `--mib` MiB of the benchmark payloads (`json`: `bench.loadgen.json_bodies`, a
device's telemetry; `filler`: what bench.loadgen sends by default) with every codec Arrow ships
to Parquet writers, at the levels that trade ratio for speed (zstd's negative levels are its
fast modes; LZ4's levels above 1 are its slower HC modes, so only the default is shown), and
times the other per-byte work a stored payload meets on its way out: SHA-256 (botocore signs
the body of a put over plain HTTP), CRC32 (its default checksum), and first touch of fresh
memory. Prints ns per KiB (the best of `--repeat` runs) and the ratio. Run it pinned
(`taskset -c 0`) on a quiet machine. bench/RESULTS.md compares these with the archive's budget
(15 % of the broker's CPU per message).
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import mmap
import time
import zlib
from collections.abc import Callable

import pyarrow as pa

from bench.loadgen import json_bodies

# (codec, level): None is the codec's default. Ordered as the table in bench/RESULTS.md.
CODECS: list[tuple[str, int | None]] = [
    ("lz4_raw", None),
    ("snappy", None),
    ("zstd", 1),
    ("zstd", -1),
    ("zstd", -5),
    ("zstd", -10),
    ("zstd", -20),
    ("zstd", -50),
    ("zstd", -100),
]


def sample(payload: str, mib: int) -> bytes:
    bodies = json_bodies(1024) if payload == "json" else [b"x" * 1024]
    return b"".join(itertools.islice(itertools.cycle(bodies), 1024 * mib))


def best_ns_per_kib(work: Callable[[], object], size: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter_ns()
        work()
        best = min(best, time.perf_counter_ns() - started)
    return best / (size / 1024)


def touch_fresh(size: int) -> None:
    """Write one byte per page of memory the process never had: a fault and a zeroed page each."""
    with mmap.mmap(-1, size) as area:
        for offset in range(0, size, mmap.PAGESIZE):
            area[offset] = 1


def rows(data: bytes, repeat: int) -> list[tuple[str, float, str]]:
    buffer, size = pa.py_buffer(data), len(data)
    table = []
    for name, level in CODECS:
        codec = pa.Codec(name, compression_level=level) if level is not None else pa.Codec(name)
        ratio = size / codec.compress(buffer).size
        label = name if level is None else f"{name} {level}"
        ns = best_ns_per_kib(lambda codec=codec: codec.compress(buffer), size, repeat)
        table.append((label, ns, f"{ratio:.2f}:1"))
    table.append(
        ("SHA-256", best_ns_per_kib(lambda: hashlib.sha256(data).digest(), size, repeat), "")
    )
    table.append(("CRC32", best_ns_per_kib(lambda: zlib.crc32(data), size, repeat), ""))
    table.append(("fresh memory", best_ns_per_kib(lambda: touch_fresh(size), size, repeat), ""))
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--payload", choices=["json", "filler"], default="json")
    parser.add_argument("--mib", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)
    data = sample(args.payload, args.mib)
    print(f"{args.payload} payloads, {len(data):,} bytes, best of {args.repeat}")
    print("| work on 1 KiB | ns | ratio |\n|---|---:|---:|")
    for label, ns, ratio in rows(data, args.repeat):
        print(f"| {label} | {ns:,.0f} | {ratio} |")


if __name__ == "__main__":
    main()

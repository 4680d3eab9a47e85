"""A benchmark's table: printed, and with `--write` appended to bench/RESULTS.md."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).with_name("RESULTS.md")


def emit(lines: list[str], write: bool) -> None:
    text = "\n".join(lines) + "\n"
    print(text)
    if write:
        with RESULTS.open("a") as out:
            out.write(text)

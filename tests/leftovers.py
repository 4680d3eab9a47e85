"""Processes a test's `make run` left behind, found by the marker variable every process it
starts inherits (`RUNPLATFORM_TEST_MARKER`)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def marked_processes(marker: str) -> list[str]:
    """`pid: command line` of each process still carrying `marker` in its environment."""
    needle = f"RUNPLATFORM_TEST_MARKER={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                found.append(f"{entry.name}: {(entry / 'cmdline').read_bytes()[:200]!r}")
    return found

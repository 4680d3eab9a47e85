"""`make run` started by a test: its environment on the embedded defaults in the test's own
folders and on free ports, and the processes it left behind, found by the marker variable every
process it starts inherits (`RUNPLATFORM_TEST_MARKER`)."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterable
from pathlib import Path

from common.runtime import embedded


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


def make_run_environment(
    folder: Path, port_variables: Iterable[str], **settings: str
) -> dict[str, str]:
    """This process's environment as `make run` would see it on its embedded defaults: no
    DATABASE_URL or REDIS_URL, Postgres, Redis, state, objects and checkpoints under `folder`,
    each port variable on a free port, a fresh marker, then `settings` on top."""
    ports = tuple(port_variables)
    env = dict(os.environ)
    for name in ("DATABASE_URL", "REDIS_URL", "PLATFORM_ROLE", "SPARK_MASTER", *ports):
        env.pop(name, None)
    env.update(
        EMBEDDED_PG_DIR=str(folder / "postgres"),
        EMBEDDED_REDIS_DIR=str(folder / "redis"),
        PLATFORM_STATE_DIR=str(folder / "state"),
        OBJECT_STORE_URL=f"file://{folder / 'objects'}",
        RULES_CHECKPOINT=str(folder / "rules-checkpoint"),
        LOG_LEVEL="WARNING",
        RUNPLATFORM_TEST_MARKER=uuid.uuid4().hex,
        **{name: str(embedded.free_port()) for name in ports},
    )
    env.update(settings)
    return env

"""The control plane's one lock over the archive's bookkeeping: compaction, retention and the
storage sampler's index each rewrite markers or the index, so they take it in turn."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from django.db import connection

# pg_advisory_lock key of the archive's writers in the control plane (compaction, retention,
# the storage sampler's index): any fixed 64-bit number no other lock uses.
ARCHIVE_LOCK = 0x61726368_69766531  # "archive1"


@contextmanager
def archive_lock() -> Iterator[None]:
    """Hold the control plane's archive lock (a Postgres advisory lock) for the block."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [ARCHIVE_LOCK])
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [ARCHIVE_LOCK])

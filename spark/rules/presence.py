"""A sender's presence in Postgres, so what it claimed is taken again the moment its process
ends (kill -9 included), not after a lease runs out.

A `Presence` holds a session advisory lock `(space, id)` on a connection of its own for as long
as its process lives; Postgres lets go of it when that connection ends, however it ends. Rows a
sender claims carry its id (`claimed_by`); `ORPHANED` is true of a claim whose sender holds no
such lock any more, so another sender (or the same job restarted) can take it back at once.
"""

from __future__ import annotations

import secrets
import threading
from typing import Any

import psycopg

from spark.rules import store as db

# Advisory lock spaces (the first key of the two-key form), one per kind of claim.
SINK_SENDERS = 0x534E4B  # "SNK"
ALARM_NOTIFIERS = 0x414C4D  # "ALM"

# `claimed_by`'s sender holds no lock in `space` (a parameter) in this database: it is gone.
ORPHANED = """
claimed_by IS NOT NULL AND claimed_by NOT IN (
  SELECT objid::bigint FROM pg_locks
   WHERE locktype = 'advisory' AND classid = %(space)s AND objsubid = 2 AND granted
     AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))
"""


class Presence:
    """This process's sender of one kind: `id` (for `claimed_by`), held by `hold()`."""

    def __init__(self, dsn: str, space: int) -> None:
        self.dsn, self.space = dsn, space
        self.id = secrets.randbelow(2**31 - 1) + 1  # an int4 key, positive: objid is unsigned
        self._conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    def hold(self, *, check: bool = False) -> None:
        """Hold the lock (again, after its connection was lost; `check` asks the connection).
        Claims are taken only after it: a claim by a sender without its lock looks orphaned."""
        with self._lock:
            if self._conn is not None and not self._conn.closed:
                if not check:
                    return
                try:
                    self._conn.execute("SELECT 1")
                    return
                except psycopg.Error:
                    self._conn.close()
            conn = db.connect(self.dsn)
            conn.execute("SELECT pg_advisory_lock(%s, %s)", (self.space, self.id))
            self._conn = conn

    def params(self) -> dict[str, int]:
        return {"space": self.space, "owner": self.id}

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()  # lets go of the lock
                self._conn = None

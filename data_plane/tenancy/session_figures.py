"""How much each live connection's session holds: its queue depth and its deliveries in flight,
for the control plane's session inspection (`GET /api/v1/sessions`). Presence writes them beside
its rows in `tenants_deviceconnection` (`queued`, `inflight`).

A sample, not a record: every `EVERY` seconds the writer asks `sample()` which connections'
figures differ from what it last wrote, and writes only those, in one statement (arrays). Nothing
runs per message; a reader sees figures up to `EVERY` seconds old (plus the writer's interval).
The sample looks at `CHUNK` sessions per loop turn: a sample of 100,000 connections costs about
45 ms of CPU (65 ms when a tenth of them moved), under 1.5 % of a core at one sample per 5 s, in
pieces of a few milliseconds (`bench/session_figures.py`, bench/RESULTS.md).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from common.contracts import tables
from data_plane.broker.session import Session

# Seconds between samples (`MQTT_SESSION_FIGURES_INTERVAL`: tests ask for less).
EVERY = float(os.environ.get("MQTT_SESSION_FIGURES_INTERVAL") or 5.0)
CHUNK = 5000  # sessions looked at per loop turn
_GONE = object()

# One statement for a whole sample: a connection's row by its key.
UPDATE = f"""
UPDATE {tables.DEVICE_CONNECTION} c SET queued = a.queued, inflight = a.inflight
  FROM unnest(%s::text[], %s::int[], %s::int[]) AS a(key, queued, inflight)
 WHERE c.connection_key = a.key
"""


def figures_of(session: Session | None) -> tuple[int, int]:
    """(queued, in flight) of a session; (0, 0) for a connection without one yet."""
    if session is None:
        return 0, 0
    return len(session.queue), len(session.inflight)


class SessionFigures:
    """What was last written per connection row, so a sample writes only what changed. A row
    starts at (0, 0): the connect that writes it sets both (data_plane.tenancy.presence)."""

    def __init__(self) -> None:
        self._written: dict[str, tuple[int, int]] = {}

    def changed(
        self, keys: Iterable[str], sessions: Mapping[str, Any]
    ) -> list[tuple[str, int, int]]:
        """(key, queued, in flight) of each row key in `keys` (its session in `sessions`) whose
        figures moved; a key no longer in `sessions` (the connection left) is passed over."""
        written = self._written
        out = []
        for key in keys:
            session = sessions.get(key, _GONE)
            if session is _GONE:
                continue
            figures = figures_of(session)
            if written.get(key, (0, 0)) != figures:
                out.append((key, *figures))
        return out

    async def sample(
        self, keys: Sequence[str], sessions: Mapping[str, Any]
    ) -> list[tuple[str, int, int]]:
        """`changed()`, a chunk of `keys` per loop turn: the event loop is never held long."""
        out: list[tuple[str, int, int]] = []
        for start in range(0, len(keys), CHUNK):
            if start:
                await asyncio.sleep(0)
            out += self.changed(keys[start : start + CHUNK], sessions)
        return out

    @staticmethod
    def params(rows: list[tuple[str, int, int]]) -> tuple[list, list, list]:
        """The arrays of `UPDATE` for `rows`."""
        return [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]

    def written(self, rows: list[tuple[str, int, int]]) -> None:
        """`rows` are committed."""
        for key, queued, inflight in rows:
            self._written[key] = (queued, inflight)

    def forget(self, key: str) -> None:
        """The connection's row is gone."""
        self._written.pop(key, None)

    def reset(self) -> None:
        """Every row was rewritten from scratch (at (0, 0))."""
        self._written.clear()

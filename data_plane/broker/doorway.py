"""Sockets before authentication: a cap per source address, and headroom below the process's
file-descriptor limit, so that idle strangers cannot take the broker's descriptors.

Every accepted socket (TCP, TLS, WebSocket) enters through `Doorway.enter` and holds a `Door`
until it closes; until its CONNACK it counts as unauthenticated. A new socket is refused (closed
at once, counted, logged sparingly) when

- its address already holds `per_source` unauthenticated sockets, or
- the process is within `reserve` descriptors of its limit: what is left is kept for
  authenticated work (the database, Redis, the archive, the usage writer) and for the clients
  already in, never for more strangers.

The deadline is the connection's: a socket that has not completed CONNECT (WebSocket: the
upgrade too) within `BrokerConfig.connect_timeout` of being accepted is closed.
"""

from __future__ import annotations

import logging
import os
import resource
import time
from collections import defaultdict
from collections.abc import Callable

log = logging.getLogger(__name__)

REFUSALS = ("per_source", "descriptors")
LOG_INTERVAL = 10.0  # seconds between log lines about refused sockets


def descriptor_limit() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def open_descriptors() -> int:
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:  # no /proc: assume the sockets are all there is
        return 0


class Door:
    """One accepted socket's place: unauthenticated until `authenticated()`, gone at `left()`."""

    __slots__ = ("doorway", "address", "pending")

    def __init__(self, doorway: Doorway, address: str) -> None:
        self.doorway: Doorway | None = doorway  # None once it has left
        self.address, self.pending = address, True

    def authenticated(self) -> None:
        if self.pending and self.doorway is not None:  # (pending: it has not left)
            self.pending = False
            self.doorway._unpend(self.address)

    def left(self) -> None:
        doorway = self.doorway
        if doorway is None:
            return
        self.doorway = None
        if self.pending:
            self.pending = False
            doorway._unpend(self.address)
        doorway.open -= 1


class Doorway:
    def __init__(
        self,
        per_source: int = 128,
        limit: int | None = None,
        reserve: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_source = per_source
        self.limit = limit if limit is not None else descriptor_limit()
        self.reserve = reserve if reserve is not None else max(64, self.limit // 20)
        self.open = 0  # sockets accepted and not yet closed
        self.pending: dict[str, int] = defaultdict(int)  # address -> unauthenticated sockets
        self.refused: dict[str, int] = dict.fromkeys(REFUSALS, 0)
        self._clock = clock
        # Descriptors that are not client sockets (listeners, database, files), measured when
        # the sockets approach the limit (a directory listing, at most once a second).
        self._others = open_descriptors()
        self._measured = float("-inf")
        self._logged = float("-inf")

    def enter(self, address: str) -> Door | None:
        """A new socket from `address`: its Door, or None when it must be closed at once."""
        if self.pending.get(address, 0) >= self.per_source:
            self._refuse("per_source", address)
            return None
        if self.open + self._others >= self.limit - self.reserve * 2 and self._full():
            self._refuse("descriptors", address)
            return None
        self.open += 1
        self.pending[address] += 1
        return Door(self, address)

    def _full(self) -> bool:
        """Within `reserve` of the limit, counting every descriptor of the process."""
        now = self._clock()
        if now - self._measured >= 1.0:
            self._measured = now
            self._others = max(0, open_descriptors() - self.open)
        return self.open + self._others >= self.limit - self.reserve

    def _refuse(self, why: str, address: str) -> None:
        self.refused[why] += 1
        now = self._clock()
        if now - self._logged >= LOG_INTERVAL:
            self._logged = now
            log.warning(
                "refusing new connections (%s): %s from %s; %d open, limit %d, %d refused so far",
                why,
                "too many unauthenticated sockets" if why == "per_source" else "descriptors low",
                address,
                self.open,
                self.limit,
                sum(self.refused.values()),
            )
        return None

    def _unpend(self, address: str) -> None:
        count = self.pending[address] - 1
        if count > 0:
            self.pending[address] = count
        else:
            del self.pending[address]

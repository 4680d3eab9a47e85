"""A connection's one timer: the CONNECT deadline until CONNACK, then the keep-alive.

The deadline closes a connection that has no session yet `connect_timeout` seconds after it was
accepted. The keep-alive ends a connection that sent nothing for 1.5 times its Keep Alive with
DISCONNECT 0x8D [MQTT-3.1.2-24]; time the broker itself held the client's reading (a publish
rate, a backed-up subscriber) does not count against the client.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Protocol

from common.mqtt.reason_codes import ReasonCode as RC


class TimedOutlet(Protocol):
    """What the timer needs of its connection."""

    closing: bool
    session: Any
    gate: Any  # `holds`: the broker stopped reading

    def close(self) -> None: ...

    def disconnect(self, reason_code: int, reason: str = "") -> None: ...


class ConnectionTimer:
    __slots__ = ("owner", "loop", "handle", "keep_alive", "last_received")

    def __init__(self, owner: TimedOutlet, loop: asyncio.AbstractEventLoop) -> None:
        self.owner, self.loop = owner, loop
        self.handle: asyncio.TimerHandle | None = None
        self.keep_alive = 0.0  # seconds; 0: none
        self.last_received = time.monotonic()  # the connection sets it on every read

    def deadline(self, seconds: float) -> None:
        """No session within `seconds`: close."""
        self.handle = self.loop.call_later(seconds, self._deadline)

    def connected(self, keep_alive: float) -> None:
        """CONNACK is out: the deadline ends, the keep-alive (if any) starts."""
        self.cancel()
        self.keep_alive = keep_alive
        if keep_alive:
            self.handle = self.loop.call_later(keep_alive * 1.5, self._check)

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None

    def _deadline(self) -> None:
        owner = self.owner
        if owner.session is None and not owner.closing:
            owner.close()

    def _check(self) -> None:
        owner = self.owner
        if owner.closing:
            return
        if owner.gate.holds:  # we stopped reading: what the client sent waits in its socket
            self.last_received = time.monotonic()
        idle = time.monotonic() - self.last_received
        limit = self.keep_alive * 1.5
        if idle >= limit:
            owner.disconnect(RC.KEEP_ALIVE_TIMEOUT)
            return
        self.handle = self.loop.call_later(limit - idle, self._check)

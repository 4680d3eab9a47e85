"""One write per loop turn: everything a connection sends during a turn of the event loop goes
out in a single `transport.write` (fewer syscalls, one TLS record or WebSocket frame).

`hold` keeps the batch back while a CONNECT is answered: CONNACK must be the first packet from
the server [MQTT-3.2.0-1], so it goes in `first` and whatever the session delivered meanwhile
follows it.
"""

from __future__ import annotations

import asyncio
from typing import Any


class Writer:
    __slots__ = ("owner", "loop", "pending", "size", "scheduled", "hold")

    def __init__(self, owner: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.owner = owner  # the connection: its transport, session and `write_paused`
        self.loop = loop
        self.pending: list[bytes] = []
        self.size = 0  # bytes batched this turn
        self.scheduled = False
        self.hold = False

    def send(self, data: bytes) -> None:
        """Queue bytes for this loop turn's single write."""
        self.pending.append(data)
        self.size += len(data)
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def first(self, data: bytes) -> None:
        """Ahead of everything batched (CONNACK), and stop holding."""
        self.hold = False
        self.pending.insert(0, data)
        self.size += len(data)
        if not self.scheduled:
            self.scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        self.scheduled = False
        if self.hold:
            return  # CONNACK goes first
        self.size = 0
        pending = self.pending
        owner = self.owner
        if pending and not owner.transport.is_closing():
            data = pending[0] if len(pending) == 1 else b"".join(pending)
            pending.clear()
            owner.transport.write(data)
            session = owner.session
            if session is not None and session.queue and not owner.write_paused:
                session.pump()  # QoS 0 held back while this turn's batch was full
        else:
            pending.clear()

    def now(self, data: bytes) -> None:
        """What was batched, then `data`, at once (a refusal just before closing)."""
        self.flush()
        if not self.owner.transport.is_closing():
            self.owner.transport.write(data)

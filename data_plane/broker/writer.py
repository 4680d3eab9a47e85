"""One write per loop turn: everything a connection sends during a turn of the event loop goes
out in a single `transport.write` (fewer syscalls, one TLS record or WebSocket frame).

`hold` keeps the batch back while a CONNECT is answered: CONNACK must be the first packet from
the server [MQTT-3.2.0-1], so it goes in `first` and whatever the session delivered meanwhile
follows it.

`shut` ends the connection without a reset (see there): whatever was written reaches the client.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sized
from typing import Protocol


class Transport(Protocol):
    """What the writer does to the connection's transport (TCP, TLS or a WebSocket's)."""

    def write(self, data: bytes) -> None: ...
    def is_closing(self) -> bool: ...
    def get_extra_info(self, name: str) -> object: ...
    def can_write_eof(self) -> bool: ...
    def write_eof(self) -> None: ...
    def resume_reading(self) -> None: ...
    def close(self) -> None: ...


class Pumped(Protocol):
    """The connection's session: it sends what it queued while this turn's batch was full."""

    @property
    def queue(self) -> Sized: ...

    def pump(self) -> None: ...


class WriterOwner(Protocol):
    """The connection, as its writer sees it."""

    @property
    def transport(self) -> Transport: ...
    @property
    def session(self) -> Pumped | None: ...
    @property
    def write_paused(self) -> bool: ...


class Writer:
    __slots__ = ("owner", "loop", "pending", "size", "scheduled", "hold", "shut_down")

    def __init__(self, owner: WriterOwner, loop: asyncio.AbstractEventLoop) -> None:
        self.owner = owner  # the connection: its transport, session and `write_paused`
        self.loop = loop
        self.pending: list[bytes] = []
        self.size = 0  # bytes batched this turn
        self.scheduled = False
        self.hold = False
        self.shut_down = False  # `shut`: nothing more is written

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
        if pending and not self.shut_down and not owner.transport.is_closing():
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
        if not self.shut_down and not self.owner.transport.is_closing():
            self.owner.transport.write(data)

    def shut(self, linger: float) -> None:
        """Write what is batched, then close so that the client can read it all. Closing a
        socket whose peer's packets sit unread makes the kernel send a reset at once, dropping
        what we wrote that the client had not yet received (the acknowledgements of messages
        already delivered: it would send them again). So our side finishes instead (FIN after
        the last byte, where the transport can: TCP), what the client still sends is read and
        discarded (the connection is closing), and the socket closes when the client closes
        its side, or after `linger` seconds. TLS does this itself: its shutdown sends
        close_notify after the last record and reads until the client's."""
        self.flush()
        self.shut_down = True
        transport = self.owner.transport
        if transport is None or transport.is_closing():
            return
        if transport.get_extra_info("sslcontext") is not None:
            transport.close()
            return
        try:
            if transport.can_write_eof():
                transport.write_eof()
            transport.resume_reading()  # a paused reader would leave the client's bytes unread
        except (NotImplementedError, AttributeError, RuntimeError, OSError):
            pass  # a WebSocket cannot half-close: the client reads, then closes itself
        self.loop.call_later(linger, transport.close)

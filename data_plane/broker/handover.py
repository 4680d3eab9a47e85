"""Sockets handed between the workers of one machine (`runbroker --workers N`): a Unix socket
per worker, and SCM_RIGHTS carrying a client's TCP socket with the bytes already read from it.

Tenant-affine workers (`data_plane.broker.landing`, placed by `data_plane.cluster.affinity`):
the kernel puts a connection on any worker sharing the port; the worker that reads its CONNECT
hands it to the tenant's home worker, which serves it as if it had accepted it. This module is
only the plumbing, with no broker in it:

- `Handover.home_of`: where a client belongs, from its first packet (its CONNECT);
- `send_socket`: one hand-over, one short-lived connection to the home's Unix socket (a
  hand-over happens once per client, at CONNECT, so a connect each is cheap enough): the
  header and the bytes in one `sendmsg` with the descriptor, the rest (a large CONNECT)
  after. True once all of it is written: the home's kernel holds the socket from then on, and
  the sender forgets it. False (refused: the home is dead or not listening yet; too slow):
  the sender still has its socket and serves the client itself.
- `HandoverListener`: the home's side. A message is served only when complete; a link that
  ends early (the sender gave up) is dropped, its descriptor closed, and nothing else
  happens: the sender serves the client.

The names are Linux abstract Unix sockets (`\\0…`): nothing to clean up after a worker killed
with -9. Only processes of this user may hand a socket over (SO_PEERCRED).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from common.mqtt.packets import PacketType

log = logging.getLogger(__name__)

# magic, version 1; kind (TCP, WS); when the socket was first accepted (monotonic clock, one
# per machine: the CONNECT deadline keeps counting from it); length of the bytes.
HEADER = struct.Struct("!4sBdI")
MAGIC = b"MQH1"
TCP = 0  # MQTT over TCP: the bytes are MQTT, from the first
WS = 1  # MQTT over WebSocket: the bytes are all the client sent, its upgrade request included
KINDS = (TCP, WS)
SEND_TIMEOUT = 1.0  # seconds a hand-over may take before the landing worker serves the client
FIRST_READ = 65536


@dataclass
class HandoverCounts:
    """Per worker, for /metrics (`mqtt_handovers`): sockets handed to a home worker, received
    from another worker, and hand-overs that failed (the landing worker served the client)."""

    sent: int = 0
    received: int = 0
    failed: int = 0


@dataclass
class Handover:
    """What a worker needs to take part: its own Unix name (without the leading NUL), where
    a tenant's client belongs (`home(tenant, client_id)`: another worker's Unix name, or None
    for here), and its counts."""

    name: str
    home: Callable[[str, str], str | None]
    counts: HandoverCounts = field(default_factory=HandoverCounts)
    max_bytes: int = 1 << 21  # what a CONNECT and what came with it may weigh

    def home_of(self, connect: Any, size: int) -> str | None:
        """Where the client whose first packet is `connect` belongs, `size` bytes read so far:
        another worker's Unix name, or None to serve it here (not a CONNECT, no `tenant/…`
        username, more bytes than a hand-over carries, or its tenant's home is here)."""
        tenant, slash, _device = (getattr(connect, "username", None) or "").partition("/")
        if connect.type is not PacketType.CONNECT or not (slash and tenant):
            return None
        if size > self.max_bytes:
            return None
        return self.home(tenant, connect.client_id)


def hand_over(
    handover: Handover,
    transport: asyncio.Transport,
    home: str,
    data: bytes,
    accepted_at: float,
    kind: int,
    done: Callable[[bool], None],
) -> None:
    """A landing worker's side: reading stops (what follows stays in the socket, for the home),
    a duplicate of the socket goes to `home` with `data` (`send_socket`), then `done(handed)`;
    a hand-over that went through is counted here, one that failed by `done` (a client that
    left meanwhile is no failure)."""
    transport.pause_reading()
    fd = os.dup(transport.get_extra_info("socket").fileno())  # ours until sent

    async def send() -> None:
        try:
            handed = await send_socket(home, fd, data, accepted_at, kind)
        finally:
            os.close(fd)
        if handed:
            handover.counts.sent += 1
        done(handed)

    asyncio.get_running_loop().create_task(send())


def unix_address(name: str) -> str:
    return "\0" + name


async def send_socket(name: str, fd: int, data: bytes, accepted_at: float, kind: int = TCP) -> bool:
    """Hand the TCP socket `fd` (the caller's own descriptor: it closes it after) and `data`
    to the worker listening on `name`. True once the home has all of it."""
    loop = asyncio.get_running_loop()
    link = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    link.setblocking(False)
    message = HEADER.pack(MAGIC, kind, accepted_at, len(data)) + data
    try:
        async with asyncio.timeout(SEND_TIMEOUT):
            await loop.sock_connect(link, unix_address(name))
            sent = await _send_with_fd(loop, link, message, fd)
            if sent < len(message):
                await loop.sock_sendall(link, message[sent:])
        return True
    except (OSError, TimeoutError) as exc:
        log.info("hand-over to %s failed (%s): serving here", name, exc)
        return False
    finally:
        link.close()


async def _send_with_fd(
    loop: asyncio.AbstractEventLoop, link: socket.socket, message: bytes, fd: int
) -> int:
    while True:
        try:
            return socket.send_fds(link, [message[:FIRST_READ]], [fd])
        except BlockingIOError:
            await _writable(loop, link)


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    ready = loop.create_future()
    loop.add_reader(sock.fileno(), _done, ready)
    try:
        await ready
    finally:
        loop.remove_reader(sock.fileno())


async def _writable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    ready = loop.create_future()
    loop.add_writer(sock.fileno(), _done, ready)
    try:
        await ready
    finally:
        loop.remove_writer(sock.fileno())


def _done(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


Serve = Callable[[socket.socket, int, bytes, float], Awaitable[None]]


class HandoverListener:
    """This worker's Unix socket: each complete hand-over goes to `serve(sock, kind, data,
    accepted_at)`."""

    def __init__(self, handover: Handover, serve: Serve) -> None:
        self.handover = handover
        self.serve = serve
        self.sock: socket.socket | None = None
        self.task: asyncio.Task[None] | None = None
        self.links: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(unix_address(self.handover.name))
        sock.listen(512)
        sock.setblocking(False)
        self.sock = sock
        self.task = asyncio.get_running_loop().create_task(self._accept_forever(sock))

    def close(self) -> None:
        """No more hand-overs to this worker: the others serve their clients themselves."""
        if self.task is not None:
            self.task.cancel()
        for task in list(self.links):
            task.cancel()
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    async def _accept_forever(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            link, _ = await loop.sock_accept(sock)
            task = loop.create_task(self._receive(link))
            self.links.add(task)
            task.add_done_callback(self.links.discard)

    async def _receive(self, link: socket.socket) -> None:
        fds: list[int] = []
        try:
            creds = link.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            _pid, uid, _gid = struct.unpack("3i", creds)
            if uid != os.getuid():
                log.warning("hand-over refused from uid %d", uid)
                return
            async with asyncio.timeout(SEND_TIMEOUT * 2):
                data, fds = await self._read(link)
            if data is None or len(fds) != 1:
                return
            client = socket.socket(fileno=fds.pop())
            if client.family not in (socket.AF_INET, socket.AF_INET6):
                client.close()
                return
            client.setblocking(False)
            self.handover.counts.received += 1
            kind, accepted_at, payload = data
            await self.serve(client, kind, payload, accepted_at)
        except (OSError, TimeoutError, ValueError) as exc:
            log.info("hand-over not received: %s", exc)
        finally:
            link.close()
            for fd in fds:  # an incomplete message's socket: its sender serves the client
                os.close(fd)

    async def _read(self, link: socket.socket) -> tuple[tuple[int, float, bytes] | None, list[int]]:
        loop = asyncio.get_running_loop()
        while True:
            try:
                first, fds, _flags, _addr = socket.recv_fds(link, FIRST_READ, 1)
                break
            except BlockingIOError:
                await _readable(loop, link)
        if len(first) < HEADER.size:
            return None, fds
        magic, kind, accepted_at, length = HEADER.unpack_from(first)
        if magic != MAGIC or kind not in KINDS or length > self.handover.max_bytes:
            return None, fds
        body = bytearray(first[HEADER.size :])
        while len(body) < length:
            chunk = await loop.sock_recv(link, min(FIRST_READ, length - len(body)))
            if not chunk:
                return None, fds  # the sender gave up
            body += chunk
        if len(body) != length:
            return None, fds
        return (kind, accepted_at, bytes(body)), fds


def now() -> float:
    """The clock `accepted_at` is on (CLOCK_MONOTONIC: one for every process of the machine)."""
    return time.monotonic()


async def serve_accepted(sock: socket.socket, protocol: Callable[[], asyncio.Protocol]) -> None:
    """The home's side of a hand-over: the socket served by a fresh `protocol()`."""
    loop = asyncio.get_running_loop()
    try:
        await loop.connect_accepted_socket(protocol, sock)
    except OSError as exc:  # the client went meanwhile
        log.info("handed socket gone before it was served: %s", exc)
        sock.close()

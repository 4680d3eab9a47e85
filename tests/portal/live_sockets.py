"""The live view as an attacker drives it: raw WebSocket clients on `/ws/live/` with a member's
session cookie (no browser), and the broker's side of it counted from the kernel's socket table."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import websockets
from django.conf import settings
from django.test import Client


def session_cookie(user) -> str:
    """A logged-in portal session of `user`, as the login form would leave it (in the database the
    portal process shares)."""
    client = Client()
    client.force_login(user)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


class LiveSocket:
    """One `/ws/live/` socket: every frame it receives, and how it was closed."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.frames: list[dict] = []
        self.close_code: int | None = None
        self._changed = asyncio.Event()
        self._reader = asyncio.get_running_loop().create_task(self._read())

    async def _read(self) -> None:
        try:
            async for text in self.ws:
                self.frames.append(json.loads(text))
                self._changed.set()
        except websockets.ConnectionClosed:
            pass
        self.close_code = self.ws.close_code
        self._changed.set()

    @property
    def closed(self) -> bool:
        return self.close_code is not None

    async def wait_for(self, found: Callable[[LiveSocket], object], timeout: float = 10) -> object:
        deadline = time.monotonic() + timeout
        while True:
            result = found(self)
            if result:
                return result
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass

    def of_type(self, kind: str) -> list[dict]:
        return [frame for frame in self.frames if frame.get("type") == kind]

    async def outcome(self, timeout: float = 10) -> str:
        """`live` once the broker feed is up, `refused` when the portal closed the socket."""

        def settled(sock: LiveSocket) -> str | None:
            if any(frame.get("connected") for frame in sock.of_type("status")):
                return "live"
            return "refused" if sock.closed else None

        return await self.wait_for(settled, timeout) or "pending"

    async def watch(self, topic_filter: str) -> None:
        await self.ws.send(json.dumps({"watch": topic_filter}))
        watching = await self.wait_for(
            lambda sock: any(f.get("filter") == topic_filter for f in sock.of_type("watching"))
        )
        assert watching, f"no 'watching' frame for {topic_filter!r}: {self.frames[-5:]}"

    def payloads(self) -> list[str]:
        return [frame["payload"] for frame in self.of_type("message")]

    async def close(self) -> None:
        await self.ws.close()
        await self._reader


async def open_live(url: str, cookie: str) -> LiveSocket:
    ws = await websockets.connect(
        url.replace("http://", "ws://") + "/ws/live/",
        additional_headers={"Cookie": f"{settings.SESSION_COOKIE_NAME}={cookie}", "Origin": url},
        open_timeout=20,
        max_queue=None,
    )
    return LiveSocket(ws)


async def open_many(url: str, cookies: list[str]) -> list[LiveSocket]:
    """One socket per cookie in the list (repeat a cookie to open several), all at once."""
    return list(await asyncio.gather(*(open_live(url, cookie) for cookie in cookies)))


def broker_connections(port: int) -> int:
    """Established TCP connections the broker holds on its MQTT port (its side of each one)."""
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        path = Path(table)
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            local, state = fields[1], fields[3]
            if state == "01" and int(local.rsplit(":", 1)[1], 16) == port:
                count += 1
    return count

"""Follows the control plane's `mqtt_config` NOTIFY channel and hands each change to a callback.

If the listening connection drops, it reconnects with backoff and reports a `reload` (every cache
must be dropped: changes may have been missed while it was away), so no stale entry lives forever.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

import psycopg

from common.contracts.notifications import CHANNEL, ChangeKind
from common.runtime.cancellation import cancel_and_wait

log = logging.getLogger(__name__)

Change = dict[str, object]


class ConfigListener:
    def __init__(
        self,
        dsn: str,
        on_change: Callable[[Change], Awaitable[None]],
        *,
        channel: str = CHANNEL,
    ) -> None:
        self.dsn = dsn
        self.on_change = on_change
        self.channel = channel
        self.connected = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="config-listener")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _run(self) -> None:
        backoff = 0.2
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {self.channel}")
                    # Everything read again once listening, the first time too: what the
                    # followers loaded before (the archive's needs at start-up) missed any
                    # change committed between that read and this LISTEN (measured: a broker
                    # started while rules were being saved archived nothing for 39 of them,
                    # and their actions never ran).
                    await self.on_change({"kind": ChangeKind.RELOAD.value})
                    backoff = 0.2
                    self.connected.set()
                    async for notify in conn.notifies():
                        await self._dispatch(notify.payload)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the database went away: retry, then reload everything
                self.connected.clear()
                log.warning("config listener lost its connection (%s); retrying", exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _dispatch(self, payload: str) -> None:
        try:
            change = json.loads(payload)
        except ValueError:
            log.warning("ignoring malformed notification %r", payload[:200])
            return
        if isinstance(change, dict):
            try:
                await self.on_change(change)
            except Exception:
                log.exception("config change handler failed for %r", change)

"""The archive tap: the routed messages and client lifecycle events a tenant's history policies
or rules need (`archive_decision`), as Parquet segments (see `parquet_archive`).

On the event loop the broker calls the tap's recorder (its `Archive` port, `tap.record`) with each
routed message. The recorder first asks whether the message is needed: one dict lookup for a
tenant that archives nothing, whose messages end there; a second, per topic, for one that
archives something. A needed message has each of its fields appended to its column (its
publisher once per batch, an index per message) and its payload copied into a reused buffer
(`archive_columns.PublishColumns`): nothing decoded or converted. The tap hands the columns to a
worker thread once `HANDOFF_ROWS` have gathered (the C recorder says so as it happens; every
`TICK` seconds the tap checks too), which writes them as row groups of the open segments; every
`interval` seconds it closes the segments (a second thread uploads them). Building and
compressing never run on the loop. The broker's
own `$SYS`/`$events` messages are not archived (the worker leaves them out).
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from time import monotonic, time
from typing import Any

from common.archive.schema import (
    EVENT_CONNECTED,
    EVENT_DISCONNECTED,
    EVENT_SUBSCRIBED,
    EVENT_UNSUBSCRIBED,
    SHADOW_EVENTS,
)
from common.mqtt.packets import Subscription
from common.runtime.cancellation import cancel_and_wait
from data_plane.broker.connection import MQTTConnection
from data_plane.broker.hooks import Hooks
from data_plane.broker.message import Message
from data_plane.broker.session import Session
from data_plane.storage.archive_columns import RECORDER, PublishColumns, reusable_columns
from data_plane.storage.archive_decision import ArchiveDecisions
from data_plane.storage.parquet_archive import ParquetArchiveWriter

log = logging.getLogger(__name__)

# Hand-offs: rows are handed to the worker once this many have gathered (checked every TICK
# seconds), and at every interval. Small enough that the worker reads payloads the loop has just
# written, still in cache, through buffers whose pages stay mapped; large enough for few hand-offs.
TICK = 0.02
HANDOFF_ROWS = 8192
SPARE_BUFFERS = 4  # columns (or payload buffers) kept for reuse
# Batches handed to the builder and not yet written, at most, before hand-offs wait (the rows
# gather in the open batch meanwhile, as they would with no hand-off at all).
MAX_QUEUED_BATCHES = 4


def name_os_thread(name: str) -> None:
    """Give the calling thread `name` where the OS shows it (`top -H`, `ps -L`, /proc/…/comm):
    an operator looking at a busy broker sees which thread is the archive's. Linux only; a
    no-op elsewhere."""
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def _log_failure(future: asyncio.Future) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.error("archive batch failed", exc_info=future.exception())


class ArchiveTap:
    def __init__(
        self,
        writer: ParquetArchiveWriter,
        *,
        decisions: ArchiveDecisions | None = None,
        enabled_for: Callable[[str], bool] | None = None,
        interval: float = 1.0,
    ) -> None:
        """`decisions`: what each tenant needs archived (None: everything, for tools and
        tests); `enabled_for(tenant)`, asked by the encoding thread once per batch: a filter
        after the fact (None: none)."""
        self.writer = writer
        # Tenants that archive something -> their topics' decisions (None: every message).
        self._needed = decisions.tenants if decisions is not None else None
        writer.warm_up()  # at start-up, before the broker freezes what it loaded (see warm_up)
        if RECORDER != "c":
            log.warning(
                "archive: the C recorder is not built; the Python one costs more per message"
            )
        self.enabled_for = enabled_for  # callable(tenant) -> bool; None: every tenant
        self.interval = interval
        # Tenants whose rules read something (the live feed's, changed in place), and whether
        # one of them has rows waiting: then the rows are handed over at the next tick, not at
        # the interval, so the live rules job has them within tens of milliseconds.
        self._live: dict[str, Any] | None = writer.feed.tenants if writer.feed else None
        self._live_waiting = False
        self._handed = False  # a hand-off since then
        self._spare: list[Any] = []  # columns the worker is done with (`reusable_columns`)
        self._sealed_at = 0.0  # monotonic()
        # Publishes since the last hand-off, and the broker's `Archive` port: the recorder,
        # called with each routed message (see ports.Archive).
        self._columns, self.record = self._new_batch()
        self._events: list[dict[str, object]] = []
        self._task: asyncio.Task | None = None
        # The newest batch handed to the builder. Batches encode first in first out on one
        # thread, so once this one is done every earlier one is too: stop() waits for it, since
        # the periodic flush it cancels may have handed over the last rows a moment before.
        self._encoding: asyncio.Future | None = None
        self._upload: asyncio.Future | None = None
        self._queued = 0  # batches handed to the builder, not yet written
        # One thread builds, one uploads: a slow store never delays the next batch's encoding.
        self._builder = ThreadPoolExecutor(
            1, "archive-build", initializer=name_os_thread, initargs=("archive-build",)
        )
        self._uploader = ThreadPoolExecutor(
            1, "archive-upload", initializer=name_os_thread, initargs=("archive-upload",)
        )

    def listen(self, hooks: Hooks) -> None:
        """Record the broker's lifecycle events too (messages come through the port)."""
        hooks.add("client.connected", self._connected)
        hooks.add("client.disconnected", self._disconnected)
        hooks.add("session.subscribed", self._subscribed)
        hooks.add("session.unsubscribed", self._unsubscribed)
        hooks.add("shadow.changed", self._shadow_changed)  # rule inputs `$events/shadow/…`

    # -- on the event loop: appends only ------------------------------------------------

    def _event(self, event: str, tenant: str, client_id: str, device: str, **fields: Any) -> None:
        if self._needed is not None:
            topics = self._needed.get(tenant)
            if topics is None or event not in topics.events:
                return
        if self._live is not None and tenant in self._live:
            self._live_waiting = True
        self._events.append(
            {
                "event": event,
                "tenant": tenant,
                "ts": int(time() * 1000),
                "client_id": client_id,
                "username": f"{tenant}/{device}" if device else None,
                **fields,
            }
        )

    def _connected(self, conn: MQTTConnection) -> None:
        session = conn.session
        self._event(
            EVENT_CONNECTED,
            conn.tenant,
            conn.client_id,
            conn.device,
            peer=conn.peer,
            proto_ver=conn.protocol_version,
            keepalive=int(conn.timer.keep_alive),
            clean_start=conn.clean_start,
            session_expiry=session.expiry_interval if session is not None else None,
        )

    def _disconnected(self, conn: MQTTConnection) -> None:
        self._event(
            EVENT_DISCONNECTED,
            conn.tenant,
            conn.client_id,
            conn.device,
            peer=conn.peer,
            proto_ver=conn.protocol_version,
            reason=conn.disconnect_reason or "normal",
        )

    def _subscribed(self, session: Session, sub: Subscription) -> None:
        self._event(
            EVENT_SUBSCRIBED,
            session.tenant,
            session.client_id,
            session.device,
            topic=sub.topic_filter,
            qos=sub.qos,
        )

    def _unsubscribed(self, session: Session, topic_filter: str) -> None:
        self._event(
            EVENT_UNSUBSCRIBED,
            session.tenant,
            session.client_id,
            session.device,
            topic=topic_filter,
        )

    def _shadow_changed(
        self, tenant: str, client_id: str, device: str, topic: str, payload: bytes, kind: str
    ) -> None:
        self._event(SHADOW_EVENTS[kind], tenant, client_id, device, topic=topic, payload=payload)

    # -- batches ------------------------------------------------------------------------

    def start(self) -> None:
        self._sealed_at = monotonic()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="archive")

    async def _run(self) -> None:
        # Never awaits the builder: a tick that waited for a seal (queued behind the batch being
        # encoded) let rows pile up meanwhile, and a bigger batch took longer still. Measured
        # under 120,000 msg/s: hand-offs of 98,000 rows, payload buffers of 128 MiB too large to
        # reuse, and a page fault on the event loop every 5 messages.
        while True:
            await asyncio.sleep(TICK)
            try:
                if monotonic() - self._sealed_at >= self.interval:
                    self._seal()
                elif (
                    len(self._columns) >= HANDOFF_ROWS or self._live_waiting
                ) and self._queued < MAX_QUEUED_BATCHES:
                    self._hand_off()
                self._mark()
            except Exception:  # a bug in encoding must not end the archive
                log.exception("archive batch failed")

    def _mark(self) -> None:
        """Tell the live feed everything received until now is handed over — after a hand-off
        — unless a live tenant's rows still wait in the batch (a hand-off held back by a busy
        builder). Queued on the builder behind the hand-offs, so the feed sends it after their
        rows. Not while idle: marks every tenth of a second then held the last segment's upload
        back by seconds (tests/spark/test_live_s3.py); an idle broker stops holding the job's
        clock back 2 s after its last mark (`spark.rules.feed.Watermarks.STALE`)."""
        feed = self.writer.feed
        if feed is None or self._live_waiting or not self._handed:
            return
        now = time()
        self._handed = False
        marking = asyncio.get_running_loop().run_in_executor(self._builder, feed.mark, now)
        marking.add_done_callback(_log_failure)

    def _hand_off(self) -> None:
        """Give the rows gathered (and the lifecycle events) to the worker."""
        loop = asyncio.get_running_loop()  # first: without a loop, nothing changes hands
        columns = self._columns
        self._columns, self.record = self._new_batch()
        events, self._events = self._events, []
        self._live_waiting = False
        if not len(columns) and not events:
            return
        self._handed = True
        self._encoding = loop.run_in_executor(
            self._builder, self.writer.add, columns, events, self.enabled_for
        )
        self._queued += 1
        self._encoding.add_done_callback(_log_failure)  # nobody awaits an interim batch
        self._encoding.add_done_callback(lambda _: self._recycle(columns))

    def _new_batch(self) -> tuple[PublishColumns, Callable[[Message], None]]:
        columns = PublishColumns(self._spare.pop() if self._spare else None)
        return columns, self._gated(columns.recorder(HANDOFF_ROWS, self._full))

    def _gated(self, record: Callable[[Message], None]) -> Callable[[Message], None]:
        """`record` behind the decision: a message is recorded only if its tenant needs it (and
        one of a tenant whose rules read something is handed over at the next tick)."""
        live = self._live
        if self._needed is None:
            if live is None:
                return record

            def marked(m: Message) -> None:
                record(m)
                if m.tenant in live:
                    self._live_waiting = True

            return marked
        needed = self._needed.get
        if live is None:

            def gated(m: Message) -> None:
                topics = needed(m.tenant)
                if topics is not None and topics[m.topic]:
                    record(m)

            return gated

        def gated_live(m: Message) -> None:
            topics = needed(m.tenant)
            if topics is not None and topics[m.topic]:
                record(m)
                if m.tenant in live:
                    self._live_waiting = True

        return gated_live

    def _full(self) -> None:
        """The batch reached `HANDOFF_ROWS` (called by the C recorder, in the publish path): hand
        it over now. Ticks alone came late under load: one iteration of a busy loop can route
        25,000 messages, and each batch (25 MiB of payloads) left the cache before the worker
        read it."""
        if self._queued < MAX_QUEUED_BATCHES:
            self._hand_off()

    def _recycle(self, columns: PublishColumns) -> None:
        self._queued -= 1
        reused = reusable_columns(columns)
        if reused is not None and len(self._spare) < SPARE_BUFFERS:
            self._spare.append(reused)

    def _seal(self) -> None:
        """Hand the rows over and queue the closing of the segments behind them (one builder
        thread: in order); once closed, an upload round starts (`_sealed`)."""
        self._hand_off()
        self._sealed_at = monotonic()
        self._encoding = asyncio.get_running_loop().run_in_executor(self._builder, self.writer.seal)
        self._encoding.add_done_callback(_log_failure)
        self._encoding.add_done_callback(self._sealed)

    def _sealed(self, _: asyncio.Future) -> None:
        if self.writer.pending_bytes and (self._upload is None or self._upload.done()):
            loop = asyncio.get_running_loop()
            self._upload = loop.run_in_executor(self._uploader, self.writer.upload_pending)

    async def flush(self, wait_upload: bool = False) -> None:
        """Hand the rows over, close the segments and wait for that; start an upload round
        (and wait for it with `wait_upload`)."""
        self._seal()
        # Shielded: the rows are out of the buffer now, so a stop() cancelling this await must
        # not cancel the queued encoding with them (stop() waits for it instead).
        await asyncio.shield(self._encoding)
        self._sealed(self._encoding)  # its callback may not have run yet
        if wait_upload and self._upload is not None:
            await self._upload

    async def written(self) -> None:
        """Everything recorded so far is in the store: handed over, encoded, uploaded (a round
        already running may not hold the last segments: one more after it)."""
        await self.flush(wait_upload=True)
        await asyncio.get_running_loop().run_in_executor(self._uploader, self.writer.upload_pending)

    async def stop(self) -> None:
        """Encode what is buffered and upload everything pending; what a store still down at
        exit could not take is lost, and the log says how much."""
        loop = asyncio.get_running_loop()
        try:
            await cancel_and_wait(self._task)  # the periodic flush; its batch is waited below
            # A batch the cancelled periodic flush handed over may still be encoding; with
            # nothing new buffered, flush() below would not wait for it, and its rows (up to an
            # interval's worth) would miss the last upload round.
            if self._encoding is not None and not self._encoding.done():
                await asyncio.wait([self._encoding])
                if not self._encoding.cancelled() and self._encoding.exception():
                    log.error("archive batch failed", exc_info=self._encoding.exception())
            # Queued behind any batch still encoding (one builder thread, first in first out).
            await self.flush(wait_upload=True)
            # The round that was running may have finished before the last batch was queued.
            await loop.run_in_executor(self._uploader, self.writer.upload_pending)
            if self.writer.pending_bytes:
                log.error(
                    "archive: %d bytes of segments not uploaded at exit",
                    self.writer.pending_bytes,
                )
            if self.writer.feed is not None:  # what it holds goes to Redis before the exit
                await loop.run_in_executor(None, self.writer.feed.close)
        finally:
            self._builder.shutdown(wait=False)
            self._uploader.shutdown(wait=False)

"""What the archive records on the event loop: routed messages, column by column.

The broker calls the recorder (its `Archive` port) once per routed message; it appends each field
to its column and nothing else: no dict, no conversion, no decode. The worker thread turns the
columns into Parquet (`parquet_archive`). Two recorders do exactly the same thing: one in C
(`_recorder.c`, built by `pip install` where a compiler is present; about half the loop's cost
of the archive was the interpreter running the Python one) and the Python one below, the
reference and the fallback. `RECORDER` says which one the broker runs.
"""

from __future__ import annotations

import io
import logging
import os
import time
from array import array
from collections.abc import Callable
from typing import Any

from common.mqtt.packets import Properties
from data_plane.broker.message import Message

log = logging.getLogger(__name__)

try:  # the compiled recorder (setup.py); optional
    from data_plane.storage import _recorder as native
except ImportError:  # no compiler at install time: the Python recorder below
    native = None
if os.environ.get("ARCHIVE_RECORDER") == "python":  # to compare them, or rule the C one out
    native = None

RECORDER = "c" if native is not None else "python"

# A payload buffer larger than this after a burst is dropped, not kept for the next batch.
MAX_REUSED_PAYLOAD_BYTES = 64 * 1024 * 1024
# The C recorder's columns, in the order `PublishColumns` unpacks them and `Recorder` takes them.
_NATIVE_FORMATS = ("d", "I", "B", "B", "B", "I", "B", "I")


class PublishColumns:
    """Routed messages, column by column: what the tap appends on the event loop.

    Column by column, not a tuple per message: appending a number to a column allocates nothing
    the garbage collector tracks. Payloads are copied, once, into `payload`, a buffer the tap
    reuses (`reusable_columns`), their sizes into `payload_size`: keeping each message's own
    bytes object instead held every payload of the batch alive, so new PUBLISHes' bytes came
    from cold or freshly faulted memory, and the worker copied each once more into Arrow. The
    worker wraps the buffer as the Parquet payload column without copying it.

    Who published (tenant, client id, device) is the same for every message of a connection: it
    is recorded once per batch, as a row of `publishers`, and each message appends only that
    row's index to `publisher` (the worker builds the three string columns and the username by
    `take` from the small table, in C). Rows are keyed by the message's `Origin`, one object per
    connection compared by identity and held by the table for the batch (so no other
    connection's object can take its place); messages without one (wills, the broker's own) are
    keyed by the values themselves.

    The numeric columns and the payload are `_recorder.Buffer`s with the C recorder, `array`s
    and a `BytesIO` with the Python one: both export their memory to Arrow without a copy, and
    `len()` counts items. The C recorder copies topics too, as UTF-8 into `topic` with their
    sizes in `topic_size` (the Python one keeps the `str`s in a list): holding a batch's topic
    strings kept thousands of small objects alive per batch, so the allocator kept taking fresh
    memory, and the worker converted each string once more. With the C recorder the tap reuses
    every column (`reusable_columns`), so a batch writes into memory the last one warmed.
    """

    __slots__ = (
        "received",
        "publisher",
        "publishers",
        "_rows",
        "topic",
        "topic_size",
        "qos",
        "retain",
        "payload",
        "payload_size",
        "properties",
        "native",
        "_buffers",
        "_at_recorder",
        "_views",
        "reusable",
    )

    def __init__(self, reused: Any = None, *, use_c: bool | None = None) -> None:
        """`reused`: what `reusable_columns` gave back (same recorder kind); `use_c`: None for
        the compiled recorder where it is built."""
        self.native = native is not None if use_c is None else use_c
        if self.native and native is None:
            raise RuntimeError("the C recorder is not built (pip install -e . with a compiler)")
        self.publishers: list[tuple[str, str, str]] = []  # (tenant, client id, device)
        # Origin (or, without one, the (tenant, client id, device) tuple) -> its row.
        self._rows: dict[Any, int] = {}
        self.properties: dict[int, Properties] = {}  # row -> properties; most have none
        self.topic_size: Any = None
        self._buffers: tuple = ()  # the C recorder's columns, as `reusable_columns` hands them on
        if self.native:
            buffers = self._buffers = reused or tuple(native.Buffer(f) for f in _NATIVE_FORMATS)
            for buffer in buffers:
                buffer.clear()  # keeps its capacity (and its mapped pages)
            (
                self.received,  # time.time()
                self.publisher,  # per message: its row of `publishers`
                self.qos,
                self.retain,
                self.payload,
                self.payload_size,  # bytes of each payload (MQTT: < 256 MiB)
                self.topic,
                self.topic_size,
            ) = buffers
        else:
            self.received = array("d")
            self.publisher = array("I")
            self.qos = bytearray()
            self.retain = bytearray()
            self.payload = reused if reused is not None else io.BytesIO()
            self.payload.seek(0)  # written from the start
            self.payload_size = array("I")
            self.topic: Any = []
        self._at_recorder: Any = None  # `record_at`'s C recorder, made at its first call
        self._views: list[memoryview] = []
        self.reusable = False  # set by `release()` once no Arrow array points into a column

    def __len__(self) -> int:
        return len(self.payload_size)

    @property
    def tenants(self) -> set[str]:
        """The tenants of the batch's publishes."""
        return {tenant for tenant, _, _ in self.publishers}

    def _row_of(self, m: Message) -> int:
        """The row of `m`'s publisher, added at its first message in the batch."""
        origin = getattr(m, "origin", None)
        if origin is None:
            key = values = (m.tenant, m.publisher, m.device)
        else:  # the connection's own values, for every message that carries it
            key, values = origin, (origin.tenant, origin.client_id, origin.device)
        row = self._rows.get(key)
        if row is None:
            row = self._rows[key] = len(self.publishers)
            self.publishers.append(values)
        return row

    def _c_recorder(self, limit: int = 0, on_full: Callable[[], None] | None = None) -> Any:
        # Any number may record into the same columns: each appends to the shared buffers.
        return native.Recorder(
            *self._buffers,  # in Recorder's order: received, publisher, ..., topic, topic_size
            self.properties,
            self._rows,
            self._row_of,
            limit,
            on_full,
        )

    def recorder(
        self, limit: int = 0, on_full: Callable[[], None] | None = None
    ) -> Callable[[Message], None]:
        """The function the broker calls per routed message. Everything is recorded, the broker's
        own messages too: the worker leaves those out. The C recorder calls `on_full()` once, as
        the batch reaches `limit` rows (the Python one leaves that to the tap's ticks)."""
        if self.native:
            return self._c_recorder(limit, on_full).record
        return self._python_recorder()

    def record_at(self, message: Message, received: float) -> None:
        """Record `message` as received at `received` (`time.time()`), not now: for callers
        outside the publish path (tests, tools)."""
        if self.native:
            if self._at_recorder is None:
                self._at_recorder = self._c_recorder()
            self._at_recorder.record_at(message, received)
        else:
            self._python_recorder()(message)
            self.received[-1] = received

    def _python_recorder(self) -> Callable[[Message], None]:
        # Every method bound once: the function runs per message.
        add_received, add_publisher = self.received.append, self.publisher.append
        row_of, new_row = self._rows.get, self._row_of
        topics, add_topic = self.topic, self.topic.append
        add_qos, add_retain = self.qos.append, self.retain.append
        write_payload, add_size = self.payload.write, self.payload_size.append
        properties = self.properties
        now = time.time

        def record(m: Message) -> None:
            # m.origin None (no connection) is never a key: new_row keys such messages by value.
            row = row_of(m.origin)
            add_publisher(new_row(m) if row is None else row)
            add_received(now())
            if m.properties:
                properties[len(topics)] = m.properties
            add_topic(m.topic)
            add_qos(m.qos)
            add_retain(m.retain)
            add_size(write_payload(m.payload))

        return record

    def view(self, column: Any) -> memoryview:
        """A column's bytes written so far, for the worker (`release()` when done)."""
        view = memoryview(column) if self.native else column.getbuffer()
        self._views.append(view)
        return view

    def release(self) -> None:
        """Give up the views. If an Arrow array still points into one (an error left one alive),
        the columns are not reused: `reusable` stays false and they are simply dropped."""
        while self._views:
            try:
                self._views[-1].release()
            except BufferError:
                return
            self._views.pop()
        self.reusable = True


def reusable_columns(columns: PublishColumns) -> Any:
    """What a new `PublishColumns` may reuse of `columns` once the worker is done with them: with
    the C recorder every column, with the Python one the payload buffer; None if an export is
    still alive or the payloads grew past `MAX_REUSED_PAYLOAD_BYTES`."""
    if not columns.reusable:
        return None
    if columns.native:
        buffers = columns._buffers
        if columns.payload.capacity > MAX_REUSED_PAYLOAD_BYTES or any(b.exports for b in buffers):
            return None
        return buffers
    if columns.payload.seek(0, io.SEEK_END) > MAX_REUSED_PAYLOAD_BYTES:
        return None
    return columns.payload


def publish_columns(
    messages: list[tuple[float, Any]], *, use_c: bool | None = None
) -> PublishColumns:
    """`(received, Message)` pairs as the tap records them; for callers outside the publish
    path (tests, tools)."""
    columns = PublishColumns(use_c=use_c)
    for received, message in messages:
        columns.record_at(message, received)
    return columns

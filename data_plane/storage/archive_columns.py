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


class PublishColumns:
    """Routed messages, column by column: what the tap appends on the event loop.

    Column by column, not a tuple per message: appending a number to a column allocates nothing
    the garbage collector tracks. Payloads are copied, once, into `payload`, a buffer the tap
    reuses (`reusable_payloads`), their sizes into `payload_size`: keeping each message's own
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
    `len()` counts items.
    """

    __slots__ = (
        "received",
        "publisher",
        "publishers",
        "_rows",
        "topic",
        "qos",
        "retain",
        "payload",
        "payload_size",
        "properties",
        "native",
        "_native_recorder",
        "_view",
        "reusable",
    )

    def __init__(self, payloads: Any = None, *, use_c: bool | None = None) -> None:
        """`payloads`: a buffer from `reusable_payloads` (same recorder kind); `use_c`: None for
        the compiled recorder where it is built."""
        self.native = native is not None if use_c is None else use_c
        if self.native and native is None:
            raise RuntimeError("the C recorder is not built (pip install -e . with a compiler)")
        self.publishers: list[tuple[str, str, str]] = []  # (tenant, client id, device)
        # Origin (or, without one, the (tenant, client id, device) tuple) -> its row.
        self._rows: dict[Any, int] = {}
        self.topic: list[str] = []
        self.properties: dict[int, dict[str, Any]] = {}  # row -> properties; most have none
        if self.native:
            self.received: Any = native.Buffer("d")  # time.time()
            self.publisher: Any = native.Buffer("I")  # per message: its row of `publishers`
            self.qos: Any = native.Buffer("B")
            self.retain: Any = native.Buffer("B")
            # A reused buffer keeps its capacity (and its mapped pages).
            self.payload: Any = payloads if payloads is not None else native.Buffer("B")
            self.payload.clear()
            self.payload_size: Any = native.Buffer("I")  # bytes of each payload (MQTT: < 256 MiB)
        else:
            self.received = array("d")
            self.publisher = array("I")
            self.qos = bytearray()
            self.retain = bytearray()
            self.payload = payloads if payloads is not None else io.BytesIO()
            self.payload.seek(0)  # written from the start
            self.payload_size = array("I")
        self._native_recorder: Any = None
        self._view: memoryview | None = None
        self.reusable = False  # set by `release()` once no Arrow array points into `payload`

    def __len__(self) -> int:
        return len(self.topic)

    @property
    def tenants(self) -> set[str]:
        """The tenants of the batch's publishes."""
        return {tenant for tenant, _, _ in self.publishers}

    def _row_of(self, m: Any) -> int:
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

    def _c_recorder(self) -> Any:
        if self._native_recorder is None:
            self._native_recorder = native.Recorder(
                self.received,
                self.publisher,
                self.qos,
                self.retain,
                self.payload,
                self.payload_size,
                self.topic,
                self.properties,
                self._rows,
                self._row_of,
            )
        return self._native_recorder

    def recorder(self) -> Callable[[Any], None]:
        """The function the broker calls per routed message. Everything is recorded, the broker's
        own messages too: the worker leaves those out."""
        if self.native:
            return self._c_recorder().record
        return self._python_recorder()

    def record_at(self, message: Any, received: float) -> None:
        """Record `message` as received at `received` (`time.time()`), not now: for callers
        outside the publish path (tests, tools)."""
        if self.native:
            self._c_recorder().record_at(message, received)
        else:
            self._python_recorder()(message)
            self.received[-1] = received

    def _python_recorder(self) -> Callable[[Any], None]:
        # Every method bound once: the function runs per message.
        add_received, add_publisher = self.received.append, self.publisher.append
        row_of, new_row = self._rows.get, self._row_of
        topics, add_topic = self.topic, self.topic.append
        add_qos, add_retain = self.qos.append, self.retain.append
        write_payload, add_size = self.payload.write, self.payload_size.append
        properties = self.properties
        now = time.time

        def record(m: Any) -> None:
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

    def payload_view(self) -> memoryview:
        """The payload bytes written (worker thread; `release()` when done)."""
        if self._view is None:
            self._view = memoryview(self.payload) if self.native else self.payload.getbuffer()
        return self._view

    def release(self) -> None:
        """Give up the payload view. If an Arrow array still points into it (an error left one
        alive), the buffer is not reused: `reusable` stays false and it is simply dropped."""
        if self._view is not None:
            try:
                self._view.release()
            except BufferError:
                return
            self._view = None
        self.reusable = True


def reusable_payloads(columns: PublishColumns) -> Any:
    """`columns`' payload buffer, if the worker is done with it and it is not oversized."""
    if not columns.reusable:
        return None
    if columns.native:
        if columns.payload.exports or columns.payload.capacity > MAX_REUSED_PAYLOAD_BYTES:
            return None
    elif columns.payload.seek(0, io.SEEK_END) > MAX_REUSED_PAYLOAD_BYTES:
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

"""The live feed's wire format, shared by its writer (the broker, `data_plane.storage.live_feed`)
and its reader (the live rules job, `spark.rules.feed`): a Redis stream, `DEFAULT_KEY` unless
`RULES_FEED_KEY` names another, whose entries hold `a`, the rows (`HISTORY_SCHEMA`: the archive's
columns and each row's message id) as an Arrow IPC stream compressed with LZ4, `n`, their
count, and `s`, the writer (one broker process).

Between them each writer adds *marks*: `s` and `w`, a time (epoch ms) by which everything it
received is in its earlier entries — its watermark, sent after each hand-off to the feed; `b`
on its last one (it stops). An idle writer sends none: a reader stops waiting on it a while
after its last. A reader that knows every live
writer's mark knows no row older than their lowest is still on its way (the alarms' timers).
Rows without `s` come from a writer that sends no marks (a broker of an older release)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.ipc as ipc

DEFAULT_KEY = "rules:live"
ROWS_FIELD = b"a"
COUNT_FIELD = b"n"
WRITER_FIELD = b"s"
MARK_FIELD = b"w"
BYE_FIELD = b"b"
_WRITE_OPTIONS = ipc.IpcWriteOptions(compression="lz4")


def encode_entry(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with ipc.new_stream(sink, table.schema, options=_WRITE_OPTIONS) as writer:
        writer.write_table(table)
    body: bytes = sink.getvalue().to_pybytes()
    return body


def decode_entry(body: bytes) -> pa.Table:
    return ipc.open_stream(pa.BufferReader(body)).read_all()

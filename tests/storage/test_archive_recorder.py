"""The archive's two recorders (`archive_columns`): the C one the broker runs and the Python one,
its reference. Whatever messages arrive, both must produce the same archive rows."""

from __future__ import annotations

import gc

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_plane.broker.message import Message, Origin
from data_plane.storage import archive_columns
from data_plane.storage.archive_columns import PublishColumns, publish_columns, reusable_columns
from data_plane.storage.archive_rows import _publish_batch, _Values, _values


def test_the_install_built_the_c_recorder():
    """`make install` compiles it (setup.py); the broker falls back to Python only where no
    compiler was present, and says so in its log."""
    assert archive_columns.RECORDER == "c"
    assert PublishColumns().native


def rows_of(columns: PublishColumns) -> list[dict]:
    try:
        with _values(columns) as (payloads, topics):
            return _publish_batch(columns, 0, len(columns), payloads, topics).to_pylist()
    finally:
        columns.release()


origins = [Origin("acme", "c1", "d1"), Origin("evil", "c1", "d1"), Origin("acme", "c2", "")]
messages = st.builds(
    lambda topic, payload, kind, qos, retain, props, origin, tenant: Message(
        topic,
        bytes(payload) if kind == "bytes" else bytearray(payload),
        qos,
        retain,
        props,
        publisher=origin.client_id if origin else "$sys-or-will",
        tenant=origin.tenant if origin else tenant,
        device=origin.device if origin else "",
        origin=origin,
    ),
    st.text(min_size=1, max_size=30),
    st.binary(max_size=300),
    st.sampled_from(["bytes", "bytearray"]),
    st.integers(0, 2),
    st.booleans(),
    st.one_of(
        st.just({}),
        st.fixed_dictionaries(
            {"content_type": st.text(max_size=5)},
            optional={
                "user_property": st.lists(st.tuples(st.text(max_size=3), st.text(max_size=3))),
                "payload_format": st.sampled_from([0, 1]),
                "message_expiry": st.integers(0, 1000),
                "correlation_data": st.binary(max_size=8),
            },
        ),
    ),
    st.sampled_from([*origins, None]),
    st.sampled_from(["acme", "evil"]),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(1.6e9, 1.9e9), messages), max_size=40))
def test_c_and_python_recorders_write_the_same_rows(batch):
    c = publish_columns(batch, use_c=True)
    python = publish_columns(batch, use_c=False)
    assert c.publishers == python.publishers
    assert rows_of(c) == rows_of(python)


def test_the_c_recorder_times_messages_with_the_wall_clock():
    import time

    columns = PublishColumns(use_c=True)
    record = columns.recorder()
    before = time.time()
    record(Message("t", b"x", 0, False, tenant="acme", publisher="c", device="d"))
    after = time.time()
    (row,) = rows_of(columns)
    assert before * 1000 - 1 <= row["ts"].timestamp() * 1000 <= after * 1000 + 1


def test_a_message_missing_a_field_changes_no_column():
    """A bug upstream raises; the columns stay the same length, so rows never shift."""

    class Broken:
        origin = None
        properties = {}
        topic = "t"
        qos = 0
        retain = False  # and no payload

    columns = PublishColumns(use_c=True)
    record = columns.recorder()
    record(Message("t", b"ok", 1, True, tenant="acme", publisher="c", device="d"))
    with pytest.raises(AttributeError):
        record(Broken())
    with pytest.raises(ValueError):
        record(Message("t", b"x", 7, False, tenant="acme", publisher="c", device="d"))
    assert [len(c) for c in (columns.received, columns.publisher, columns.qos)] == [1, 1, 1]
    assert len(columns.payload_size) == len(columns.topic_size) == 1
    assert columns.payload.nbytes == 2
    assert [(r["topic"], r["payload"], r["qos"]) for r in rows_of(columns)] == [("t", b"ok", 1)]


def test_a_column_never_moves_under_an_arrow_array():
    """While Arrow points into a column it cannot grow (a realloc would free the memory under the
    array) nor be cleared for reuse; once the array is gone, it can."""
    from data_plane.storage._recorder import Buffer

    column = Buffer("B")
    column.append(1)
    array = pa.Array.from_buffers(pa.uint8(), len(column), [None, pa.py_buffer(column)])
    with pytest.raises(BufferError):  # within the first allocation it may append; not past it
        for _ in range(10_000):
            column.append(2)
    with pytest.raises(BufferError):
        column.clear()
    assert array.to_pylist() == [1]
    del array
    gc.collect()
    column.clear()
    assert len(column) == 0


def test_every_column_is_reused_with_its_capacity():
    columns = PublishColumns(use_c=True)
    record = columns.recorder()
    for n in range(100):
        record(Message(f"t/{n}", b"x" * 1000, 0, False, tenant="acme", publisher="c", device="d"))
    rows_of(columns)  # the worker's pass, then release()
    reused = reusable_columns(columns)
    assert reused is not None and reused[4] is columns.payload
    assert columns.payload.capacity >= 100_000
    capacities = [b.capacity for b in reused]
    again = PublishColumns(reused, use_c=True)
    again.recorder()(Message("é/1", b"y", 2, True, tenant="acme", publisher="c", device="d"))
    assert [b.capacity for b in reused] == capacities
    assert [(r["topic"], r["payload"], r["qos"]) for r in rows_of(again)] == [("é/1", b"y", 2)]


def test_payload_buffer_still_exported_is_not_reused():
    columns = PublishColumns(use_c=True)
    columns.recorder()(Message("t", b"x", 0, False, tenant="acme", publisher="c", device="d"))
    payloads = _Values.payloads(columns)
    kept = payloads.column(0, 1)  # an array the worker failed to drop
    payloads.close()
    columns.release()
    assert reusable_columns(columns) is None
    assert kept.to_pylist() == [b"x"]


def test_a_topic_that_is_not_utf8_never_fails_the_publish():
    """The codec never decodes a lone surrogate, but a bug that made one must not fail the
    publish in the recorder: the topic is archived with a replacement character."""
    columns = PublishColumns(use_c=True)
    columns.recorder()(Message("a/\udc80", b"x", 0, False, tenant="acme", publisher="c"))
    assert [r["topic"] for r in rows_of(columns)] == ["a/?"]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_full_batch_is_announced_once_and_a_failing_announcement_loses_nothing():
    calls = []

    def on_full():
        calls.append(len(columns))
        raise RuntimeError("the tap failed")  # reported as unraisable, never into the publish

    columns = PublishColumns(use_c=True)
    record = columns.recorder(3, on_full)
    for n in range(5):
        record(Message(f"t/{n}", b"x", 0, False, tenant="acme", publisher="c", device="d"))
    assert calls == [3]
    assert [r["topic"] for r in rows_of(columns)] == [f"t/{n}" for n in range(5)]


def test_attributes_are_read_as_python_reads_them_whatever_the_class():
    """The C recorders read a `Message`'s slots at their offsets; a subclass that overrides a
    field, or `Message` itself changed after the offsets were learned, is read through its
    attributes, as Python would."""

    class Retitled(Message):
        @property  # type: ignore[override]
        def topic(self) -> str:
            return "retitled"

        @topic.setter
        def topic(self, value: str) -> None:
            pass

    def message(cls: type = Message) -> Message:
        return cls("plain", b"x", 0, False, tenant="acme", publisher="c", device="d")

    columns = PublishColumns(use_c=True)
    record = columns.recorder()
    record(message())  # the offsets learned here
    record(message(Retitled))
    made_before = message()
    original = Message.__dict__["topic"]
    Message.topic = property(lambda self: "changed")  # type: ignore[assignment,method-assign]
    try:
        record(made_before)
    finally:
        Message.topic = original  # type: ignore[method-assign]
    record(message())
    assert [r["topic"] for r in rows_of(columns)] == ["plain", "retitled", "changed", "plain"]

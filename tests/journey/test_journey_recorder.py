"""The journey's C recorder against its Python reference, row for row."""

from hypothesis import given, settings
from hypothesis import strategies as st

from data_plane.broker.message import Message, Origin
from data_plane.broker.ports import Published
from data_plane.observability.journey import JourneyRecorder
from data_plane.observability.journey_writer import publish_table

ORIGINS = [Origin("acme", "c1", "d1"), Origin("evil", "c1", "d1"), Origin("acme", "c2", "")]


def _rows(use_c: bool, batch: list[tuple[int, int, int]]) -> list[dict]:
    recorder = JourneyRecorder("node-a", use_c=use_c)
    for which, packet_id, reached in batch:
        origin = ORIGINS[which] if which < len(ORIGINS) else None
        tenant = origin.tenant if origin else "acme"
        message = Message(
            f"t/{which}",
            b"x" * which,
            1,
            False,
            tenant=tenant,
            publisher=origin.client_id if origin else "will",
            origin=origin,
        )
        recorder.published(message, packet_id or None, Published(reached, ()))
    columns, _, _ = recorder.take()
    table = publish_table(columns, "node-a").drop_columns(["ts"])
    return [{k: v for k, v in row.items()} for row in table.to_pylist()]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 9), st.integers(0, 2)), max_size=30))
def test_c_and_python_journey_recorders_write_the_same_rows(batch):
    """Publishers interleaved in any order (the C recorder remembers the last one's row)."""
    assert _rows(True, batch) == _rows(False, batch)

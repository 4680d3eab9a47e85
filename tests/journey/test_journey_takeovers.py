"""Where did my client go? A takeover's client events name the other node (`from_node` on
`connected`, `to_node` on `taken_over`), in words too; segments written before those columns
still read (null). The two-node case through the REST API: tests/cluster/test_journey_pg.py."""

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from common.journey.schema import CLIENT_SCHEMA, CLIENTS, live_segment_key
from common.stores.object_store import LocalObjectStore
from data_plane.observability import journey_moves
from data_plane.observability.journey import JourneyRecorder
from data_plane.observability.journey_writer import JourneyWriter
from tenants.journey.display import event_row
from tenants.journey.selectors import JourneyReader
from tenants.journey.words import describe_event


def _conn(client_id: str, reason: str | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        tenant="acme",
        client_id=client_id,
        peer="127.0.0.1:5000",
        protocol_version=5,
        clean_start=True,
        session=SimpleNamespace(expiry_interval=0),
        disconnect_reason=reason,
    )


def _moves(recorder: JourneyRecorder) -> list[tuple]:
    return [(e["event"], e["node"], e["from_node"], e["to_node"]) for e in recorder.events]


def test_the_node_a_session_came_from_and_went_to_is_on_both_rows():
    a, b = JourneyRecorder("vm-a"), JourneyRecorder("vm-b")
    a._connected(_conn("c"))
    b.arriving("acme", "c", None)  # its claim at b found no live owner: nothing to say
    b._connected(_conn("other"))
    # c's CONNECT at b: its claim learns a held the session; a lets it go for b.
    b.arriving("acme", "c", "vm-a")
    a.leaving("acme", "c", "vm-b")
    a._disconnected(_conn("c", "takenover"))
    b._connected(_conn("c"))
    # Then again at b: the broker takes the older connection over, unseen by the cluster.
    b.arriving("acme", "c", None)
    b._disconnected(_conn("c", "takenover"))
    b._connected(_conn("c"))
    assert _moves(a) == [("connected", "vm-a", None, None), ("taken_over", "vm-a", None, "vm-b")]
    assert _moves(b) == [
        ("connected", "vm-b", None, None),
        ("connected", "vm-b", "vm-a", None),
        ("taken_over", "vm-b", None, "vm-b"),
        ("connected", "vm-b", "vm-b", None),
    ]


def test_a_note_never_outlives_its_connect(monkeypatch):
    recorder = JourneyRecorder("vm-b")
    recorder.arriving("acme", "c", "vm-a")  # that CONNECT failed after its claim
    recorder.arriving("acme", "c", None)  # the next one's claim clears the note
    recorder._connected(_conn("c"))
    recorder.arriving("acme", "d", "vm-a")
    now = journey_moves.time.monotonic()
    monkeypatch.setattr(journey_moves.time, "monotonic", lambda: now + journey_moves.HORIZON + 1)
    recorder._connected(_conn("d"))  # a note too old for it: not its own
    assert [e["from_node"] for e in recorder.events] == [None, None]


def test_a_node_counted_dead_names_no_node_and_says_why():
    recorder = JourneyRecorder("vm-a")
    recorder.leaving("acme", "c", journey_moves.NOBODY)
    recorder._disconnected(_conn("c", "takenover"))
    (row,) = recorder.events
    assert row["to_node"] is None and "counted dead" in row["reason"]
    assert describe_event(row)["reason"] == row["reason"]


def _row(event: str, **more) -> dict:
    return {"ts": datetime.now(UTC), "event": event, "version": 1, "node": "vm-b", **more}


@pytest.mark.parametrize(
    ("row", "words"),
    [
        (
            _row("connected", from_node="vm-a"),
            "session taken over from node vm-a (now at node vm-b)",
        ),
        (
            _row("connected", from_node="vm-b"),
            "took the session over from an older connection at this same node (vm-b)",
        ),
        (
            _row(
                "taken_over", to_node="vm-c", reason="another connection took over this client id"
            ),
            "taken over by a newer connection at node vm-c (the session went there)",
        ),
        (
            _row("taken_over", to_node="vm-b"),
            "taken over by a newer connection at this same node (vm-b)",
        ),
        # Written before the broker named the nodes: the words it had.
        (
            _row("taken_over", reason="another connection took over this client id"),
            "another connection took over this client id",
        ),
        (_row("connected"), "connected"),
    ],
)
def test_takeovers_in_words(row, words):
    described = describe_event(row)
    assert described["reason"] == words
    if words not in ("connected",):  # the portal's timelines show them (a bare event: not)
        assert event_row(row, {})["reason_text"] == words
    assert (described["from_node"], described["to_node"]) == (
        row.get("from_node"),
        row.get("to_node"),
    )


def _old_segment(store: LocalObjectStore, ts: datetime, writer: str) -> None:
    """A clients segment as brokers wrote it before `from_node` and `to_node`."""
    old = pa.schema([f for f in CLIENT_SCHEMA if f.name not in ("from_node", "to_node")])
    row = {"tenant": "acme", "ts": ts, "client_id": "c", "event": "taken_over", "version": 1}
    row |= {"reason": "another connection took over this client id", "node": "vm-a"}
    key = live_segment_key(CLIENTS, int(ts.timestamp() * 1000), writer, 1)
    path = store.root / key
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([row], schema=old), path)


@pytest.mark.parametrize("with_new", [False, True], ids=["old-only", "old-and-new"])
def test_segments_without_the_new_columns_still_read(tmp_path, with_new):
    store = LocalObjectStore(tmp_path)
    now = datetime.now(UTC)
    _old_segment(store, now - timedelta(seconds=5), "old")
    if with_new:
        recorder = JourneyRecorder("vm-b")
        recorder.arriving("acme", "c", "vm-a")
        recorder._connected(_conn("c"))
        JourneyWriter(recorder, store, writer_id="new").write(*recorder.take())
    page = JourneyReader(store).client_events(
        "acme", "c", start=now - timedelta(minutes=1), end=now + timedelta(minutes=1)
    )
    described = [describe_event(row) for row in page.rows]
    expected = [("taken_over", None, None, "another connection took over this client id")]
    if with_new:
        expected.insert(
            0, ("connected", "vm-a", None, "session taken over from node vm-a (now at node vm-b)")
        )
    assert [(d["event"], d["from_node"], d["to_node"], d["reason"]) for d in described] == expected

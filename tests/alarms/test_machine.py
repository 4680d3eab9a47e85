"""The alarm state machine alone: durations, clearing, no data, acknowledgement, late data."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from common.alarms import machine as m
from common.alarms.machine import KeyState, Timing


def _run(timing: Timing, events: list[tuple], end: float | None = None) -> list[tuple]:
    """Feed (at, raised, cleared) messages and ("ack", at, by) in order; (event, after, at)."""
    state, out = KeyState(), []
    for event in events:
        if event[0] == "ack":
            out += m.acknowledge("k", state, timing, event[1], event[2])
        else:
            at, raised, cleared = event
            out += m.message("k", state, timing, at, raised, cleared, value=at, message_id=f"m{at}")
    if end is not None:
        out += m.advance("k", state, timing, end)
    return [(t.event, t.after, t.at) for t in out]


def test_without_a_duration_one_message_raises_and_one_clears():
    got = _run(Timing(), [(1, True, False), (2, True, False), (3, False, True)])
    assert got == [("raise", "active", 1), ("clear", "normal", 3)]


def test_a_condition_must_hold_for_its_duration_and_raises_at_that_instant():
    timing = Timing(raise_for=60)
    # held from 10 on, next message at 100: active at 70, not when noticed
    assert _run(timing, [(10, True, False), (40, True, False), (100, True, False)]) == [
        ("pending", "pending", 10),
        ("raise", "active", 70),
    ]
    # broken at 50: back to normal, nothing raised; held again from 55, only to the end
    assert _run(timing, [(10, True, False), (50, False, True), (55, True, False)], end=114) == [
        ("pending", "pending", 10),
        ("cancel", "normal", 50),
        ("pending", "pending", 55),
    ]


def test_clearing_holds_for_its_own_duration_and_a_relapse_starts_it_again():
    timing = Timing(clear_for=30)
    events = [(0, True, False), (10, False, True), (20, True, False), (25, False, True)]
    assert _run(timing, events, end=54) == [("raise", "active", 0)]
    assert _run(timing, events, end=55) == [("raise", "active", 0), ("clear", "normal", 55)]


def test_no_data_raises_after_the_silence_and_the_next_message_clears_it():
    timing = Timing(no_data=60)
    got = _run(timing, [(0, False, True), (30, False, True), (200, False, True)])
    assert got == [("raise", "active", 90), ("clear", "normal", 200)]


def test_a_seeded_device_that_never_sends_raises():
    state = KeyState()
    m.seed(state, 1000)
    out = m.advance("dev", state, Timing(no_data=30), 1100)
    assert [(t.event, t.cause, t.at) for t in out] == [("raise", "no_data", 1030)]


def test_acknowledged_stops_renotifying_and_still_clears():
    timing = Timing(renotify=100)
    got = _run(
        timing, [(0, True, False), (250, True, False), ("ack", 260, "ann"), (500, False, True)]
    )
    assert got == [
        ("raise", "active", 0),
        ("renotify", "active", 100),
        ("renotify", "active", 200),
        ("acknowledge", "acknowledged", 260),
        ("clear", "normal", 500),
    ]


def test_only_an_active_alarm_can_be_acknowledged():
    state = KeyState()
    assert m.acknowledge("k", state, Timing(), 5, "ann") == []
    assert state.status == m.NORMAL


def test_a_late_message_is_read_at_the_keys_time():
    timing = Timing(raise_for=10)
    got = _run(timing, [(100, True, False), (50, True, False)], end=110)
    assert got == [("pending", "pending", 100), ("raise", "active", 110)]


def test_a_transition_carries_the_message_and_its_value():
    state = KeyState()
    (t,) = m.message("k", state, Timing(), 7, True, False, value=93.5, message_id="abc")
    assert (t.key, t.before, t.after, t.value, t.cause, t.message_id) == (
        "k",
        "normal",
        "active",
        93.5,
        "condition",
        "abc",
    )


_EVENT = st.one_of(
    st.tuples(st.integers(0, 500), st.booleans(), st.booleans()),
    st.tuples(st.just("ack"), st.integers(0, 500), st.just("p")),
)


@given(
    st.lists(_EVENT, max_size=40),
    st.integers(0, 50),
    st.integers(0, 50),
    st.sampled_from([None, 20, 90]),
)
def test_every_transition_follows_the_state_graph_in_time_order(events, raise_for, clear_for, gap):
    allowed = {
        ("normal", "pending"),
        ("pending", "normal"),
        ("pending", "active"),
        ("normal", "active"),
        ("active", "acknowledged"),
        ("active", "normal"),
        ("acknowledged", "normal"),
        ("active", "active"),
    }
    timing = Timing(raise_for, clear_for, gap, 30)
    state, last, times = KeyState(), m.NORMAL, []
    for event in events:
        if event[0] == "ack":
            out = m.acknowledge("k", state, timing, event[1], event[2])
        else:
            out = m.message("k", state, timing, event[0], event[1], event[2])
        for t in out:
            assert t.before == last and (t.before, t.after) in allowed
            last = t.after
            times.append(t.at)
    assert times == sorted(times)
    assert state.status == last

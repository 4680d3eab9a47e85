"""The live job's alarm keeper without a database: its rows out of a batch's results, each key's
machine fed in time order, timers fired by the job's clock, a replayed batch skipped."""

from __future__ import annotations

import json
from datetime import datetime

from common.alarms.definition import AlarmSpec
from common.alarms.machine import Timing
from spark.rules.alarms import Alarm, AlarmKeeper, split
from spark.rules.feed import stream_id
from spark.rules.results import BatchResults, ResultRow, Skipped

ALARM = Alarm(
    7, "acme", "hot", AlarmSpec("plant/+/temp", "payload.temp > 90", raise_for=2), Timing(2, 2), 1
)


def _row(rule_id: int, at: float, temp: float, key: str = "pump") -> ResultRow:
    out = {"alarm_key": key, "alarm_raised": temp > 90, "alarm_cleared": temp <= 90,
           "alarm_value": temp}  # fmt: skip
    return ResultRow(rule_id, "acme", datetime.fromtimestamp(at), 1, "passed", json.dumps([out]),
                     None, None, f"m{at}", "plant/pump/temp", key, f"acme/{key}")  # fmt: skip


def _keeper() -> AlarmKeeper:
    keeper = AlarmKeeper("rules:live", lambda a, b: stream_id(a) > stream_id(b))
    keeper.alarms = {ALARM.id: ALARM}
    return keeper


def test_the_alarms_rows_leave_the_rules_results():
    rule_row, alarm_row = _row(3, 1000, 95), _row(-7, 1000, 95)
    rules, alarms = split(BatchResults([rule_row, alarm_row], [Skipped(-7, "acme", None, 2, 2)]))
    assert (rules.rows, rules.skipped, alarms) == ([rule_row], [], [alarm_row])
    assert ALARM.rule().id == -7 and "payload.temp > 90" in ALARM.rule().sql


def test_rows_in_any_order_are_read_in_time_order_and_the_clock_fires_the_raise():
    keeper = _keeper()
    assert keeper.take([_row(-7, 1001, 96), _row(-7, 1000, 95)], "1000-0") == 1  # pending
    assert keeper.tick(1001.5) == 0
    assert keeper.tick(1002.0) == 1  # held 2 s since 1000: active at 1002, by the clock
    events = [(t.event, t.at, t.message_id) for _, t in keeper.transitions]
    assert events == [("pending", 1000.0, "m1000"), ("raise", 1002.0, None)]
    assert keeper.changed == {(7, "pump")} and keeper.position == "1000-0"


def test_a_batch_at_or_before_the_saved_position_was_taken():
    keeper = _keeper()
    keeper.saved = "1700000000000-5"
    assert keeper.taken("1700000000000-5") and keeper.taken("1699999999999-9")
    assert not keeper.taken("1700000000000-6") and not keeper.taken(None)


def test_a_row_of_an_alarm_no_longer_enabled_is_left():
    keeper = _keeper()
    assert keeper.take([_row(-8, 1000, 95)]) == 0 and not keeper.states


def test_a_new_key_over_max_alarm_keys_is_not_watched_and_is_counted():
    keeper = _keeper()
    capped = Alarm(7, "acme", "hot", ALARM.spec, ALARM.timing, 1, max_keys=1)
    keeper.alarms = {7: capped}
    keeper.take([_row(-7, 1000, 95, key="pump"), _row(-7, 1001, 95, key="fan")])
    assert set(keeper.states) == {(7, "pump")} and keeper.refused == {"acme": 1}
    keeper.take([_row(-7, 1002, 95, key="pump")])  # a key it has goes on
    assert keeper.refused == {"acme": 1}


def test_a_normal_key_silent_for_its_seen_days_is_forgotten_an_active_one_kept():
    keeper = _keeper()
    keeper.alarms = {7: Alarm(7, "acme", "hot", ALARM.spec, Timing(), 1, seen_days=1)}
    keeper.take([_row(-7, 1000, 20, key="quiet"), _row(-7, 1000, 95, key="hot")])
    keeper.sweep(1000 + 86_400 + 1)  # every minute, from tick
    assert set(keeper.states) == {(7, "hot")} and keeper.forgotten == [(7, "quiet")]
    assert keeper.keys["acme"] == 1


def test_only_keys_whose_timer_is_due_are_advanced_and_the_heap_stays_one_entry_a_key():
    keeper = _keeper()
    no_data = Alarm(7, "acme", "gone", AlarmSpec("plant/+/temp", no_data=60), Timing(no_data=60), 1)
    keeper.alarms = {7: no_data}
    for second in range(100):  # a reading a second from one key, one from the other at 0
        keeper.take([_row(-7, 1000 + second, 20, key="busy")])
    keeper.take([_row(-7, 1000, 20, key="quiet")])
    assert len(keeper._due) <= 3  # not one per reading
    assert keeper.tick(1061) == 1  # quiet's silence, 60 s after 1000; busy sent at 1099
    assert [(t.key, t.event, t.at) for _, t in keeper.transitions] == [("quiet", "raise", 1060.0)]
    assert keeper.tick(1158) == 0 and keeper.tick(1159) == 1  # busy: 60 s after 1099


def test_a_batch_read_fires_the_due_timers_of_keys_it_has_no_message_for_before_its_evaluation():
    """The feed's marks move the clock as a batch is read; a key the batch carries a message
    for waits for it (its clear may be in there), every other due key fires at once."""
    keeper = _keeper()
    keeper.alarms = {7: Alarm(7, "acme", "hot", AlarmSpec("plant/+/temp", "payload.temp > 90",
                                                          key="payload.k", raise_for=2),
                              Timing(2, 0), 1)}  # fmt: skip
    keeper.take([_row(-7, 1000, 95, key="pump"), _row(-7, 1000, 95, key="fan")])
    keeper.transitions.clear()  # both pending
    assert keeper.due(1001.9) == set() and keeper.due(1002.0) == {7}
    batch = [  # read, not evaluated: pump cools at 1001.5; fan's row has no payload key here
        {"tenant": "acme", "event": "message.publish", "topic": "plant/a/temp",
         "payload": b'{"k": "pump", "temp": 20}', "ts": 1001500},
        {"tenant": "acme", "event": "message.publish", "topic": "other/topic",
         "payload": b'{"k": "fan", "temp": 20}', "ts": 1001600},  # not the alarm's source
        {"tenant": "rival", "event": "message.publish", "topic": "plant/a/temp",
         "payload": b'{"k": "fan", "temp": 20}', "ts": 1001700},  # another tenant's
    ]  # fmt: skip
    held = keeper.in_flight(batch, {7})
    assert held == {7: {"pump"}}
    assert keeper.tick(1002.1, held) == 1  # fan raised at 1002; pump waits
    assert [(t.key, t.event) for _, t in keeper.transitions] == [("fan", "raise")]
    keeper.take([_row(-7, 1001.5, 20, key="pump")])  # the batch evaluated: pump cooled first
    keeper.tick(1002.1)
    # Fired early, pump would have raised: it cooled before its 2 s were up.
    moved = [(t.key, t.event) for _, t in keeper.transitions]
    assert moved == [("fan", "raise"), ("pump", "cancel")]
    assert keeper.due(1e12) == set()  # neither has a timer left


def test_a_reading_that_fails_holds_every_key_of_its_alarm():
    keeper = _keeper()
    keeper.take([_row(-7, 1000, 95, key="pump")])
    # The alarm's rule raises on this row's reading (a broken rule stands in for any failure).
    keeper._compiled[7] = (ALARM.version, None)  # type: ignore[assignment]
    held = keeper.in_flight([{"tenant": "acme", "topic": "plant/a/temp", "payload": b"{}"}], {7})
    assert held == {7: None}
    assert keeper.tick(1003, held) == 0 and keeper.due(1003) == {7}
    assert keeper.tick(1003) == 1

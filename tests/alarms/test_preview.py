"""An alarm tried over history (`common.alarms.preview`): the archive's files in DuckDB, the
definition's rule and each key's machine, on a tenant's rows only."""

from __future__ import annotations

from datetime import UTC, datetime

from common.alarms.definition import AlarmSpec
from common.alarms.preview import preview
from common.stores.object_store import LocalObjectStore
from tests.spark.conftest import message, write_live

START = datetime(2026, 12, 1, tzinfo=UTC)
END = datetime(2026, 12, 1, 1, tzinfo=UTC)
T0 = int(START.timestamp() * 1000)


def _archive(tmp_path) -> LocalObjectStore:
    store = LocalObjectStore(tmp_path / "objects")
    rows = []
    # pump-1: hot from 60 s to 200 s (a reading every 10 s), then cool; pump-2: hot for 30 s only
    for s in range(0, 600, 10):
        rows.append(message("acme", "plant/pump-1/temp", {"temp": 95 if 60 <= s < 200 else 20},
                            T0 + s * 1000, client_id="pump-1"))  # fmt: skip
        rows.append(message("acme", "plant/pump-2/temp", {"temp": 95 if 300 <= s < 330 else 20},
                            T0 + s * 1000 + 1, client_id="pump-2"))  # fmt: skip
        # another tenant's hot pump on the same topic: never read
        rows.append(message("other", "plant/pump-1/temp", {"temp": 99}, T0 + s * 1000 + 2))
    rows.append(message("acme", "plant/pump-1/temp", b"not json", T0 + 605_000, client_id="pump-1"))
    rows.append(message("acme", "office/door", {"open": True}, T0 + 606_000))  # not the source
    write_live(store, rows[::2], writer="broker-a")
    write_live(store, rows[1::2], writer="broker-b")
    return store


def test_a_condition_held_for_a_minute_raises_once_per_key_that_held_it(tmp_path):
    store = _archive(tmp_path)
    spec = AlarmSpec(source="plant/+/temp", raise_condition="payload.temp > 90", raise_for=60)
    result = preview(store, "acme", spec, START, END)
    assert (result.read, result.considered, result.failed, result.complete) == (122, 121, 1, True)
    assert (result.raised, result.keys_raised) == (1, 1)  # pump-2 was hot for 30 s only
    (pump,) = result.keys
    # pending at 60 s, active at 120 s; cool from 200 s, held the clear's duration (by default
    # the raise's, 60 s): cleared at 260 s, 140 s active
    assert (pump.key, pump.raised, pump.active_seconds, pump.state_at_end) == (
        "pump-1",
        1,
        140.0,
        "normal",
    )
    events = [(t["key"], t["event"], t["at"][11:19]) for t in result.transitions]
    assert events == [
        ("pump-1", "pending", "00:01:00"),
        ("pump-1", "raise", "00:02:00"),
        ("pump-1", "clear", "00:04:20"),
        ("pump-2", "pending", "00:05:00"),
        ("pump-2", "cancel", "00:05:30"),
    ]
    assert result.transitions[1]["value"] is None and result.transitions[1]["cause"] == "condition"


def test_no_data_raises_for_a_device_that_went_silent_and_one_that_never_sent(tmp_path):
    store = _archive(tmp_path)
    spec = AlarmSpec(source="plant/+/temp", no_data=120)
    result = preview(store, "acme", spec, START, END, devices=["pump-1", "pump-3"])
    raised = {(k.key, k.state_at_end) for k in result.keys}
    # pump-3 never sent: active from 120 s; pump-1 and pump-2 went silent after ~600 s
    assert raised == {("pump-3", "active"), ("pump-1", "active"), ("pump-2", "active")}
    firsts = [(t["key"], t["event"], t["cause"], t["at"][11:19]) for t in result.transitions]
    assert firsts[0] == ("pump-3", "raise", "no_data", "00:02:00")


def test_another_tenant_previewing_the_same_alarm_sees_only_its_own_messages(tmp_path):
    store = _archive(tmp_path)
    spec = AlarmSpec(source="plant/+/temp", raise_condition="payload.temp > 90")
    result = preview(store, "other", spec, START, END)
    assert (result.considered, result.raised, [k.key for k in result.keys]) == (60, 1, ["dev-1"])


def test_duckdb_and_the_evaluator_give_the_same_transitions_and_values(tmp_path, monkeypatch):
    """The native pass (DuckDB where it is sure) against the evaluator alone, on readings with
    the payloads where the two readers part ways."""
    from common.alarms import preview as module
    from tests.rules.test_preview_native import EXTRA_PAYLOADS

    store = LocalObjectStore(tmp_path / "objects")
    odd = [*EXTRA_PAYLOADS, b'{"temp": "96"}', b'{"temp": null}', b"{}", b'{"temp": 91.5}']
    rows = []
    for s in range(0, 1200, 7):
        payload = odd[(s // 7) % len(odd)] if s % 3 == 0 else {"temp": 95 if s % 200 < 120 else 20}
        rows.append(message("acme", f"plant/p{s % 4}/temp", payload, T0 + s * 1000,
                            client_id=f"p{s % 4}"))  # fmt: skip
    write_live(store, rows)
    spec = AlarmSpec(source="plant/+/temp", raise_condition="payload.temp > 90", raise_for=20,
                     value="payload.temp")  # fmt: skip
    assert module.native_rule(spec) is not None
    native = preview(store, "acme", spec, START, END, limit=1000)
    monkeypatch.setattr(module, "native_rule", lambda spec: None)
    evaluated = preview(store, "acme", spec, START, END, limit=1000)
    assert native.raised > 3 and native.failed > 0
    assert native.transitions == evaluated.transitions
    assert (native.keys, native.failed, native.evaluated) == (
        evaluated.keys,
        evaluated.failed,
        evaluated.evaluated,
    )

"""An alarm with no data over the keys *seen* (issue 46: "keys seen in the last days"),
switched on: the keys its source read in the tenant's history within `seen_days` get a state
watched from now, so a device silent since before the alarm existed raises after N seconds —
keys from older messages, other topics or another tenant do not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from common.alarms import machine
from common.stores.object_store import LocalObjectStore
from tenants.models import AlarmDefinition, AlarmState, AuditEntry
from tests.spark.conftest import message, write_live

pytestmark = pytest.mark.django_db

NOW = datetime.now(UTC)


def ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@pytest.fixture
def archive(tmp_path, monkeypatch) -> LocalObjectStore:
    monkeypatch.setenv("OBJECT_STORE_URL", f"file://{tmp_path}/objects")
    store = LocalObjectStore(tmp_path / "objects")
    rows = [
        message("acme", "plant/p1/temp", {"temp": 20, "site": "north"},
                ms(NOW - timedelta(days=2)), client_id="p1"),
        message("acme", "plant/p2/temp", {"temp": 21, "site": "south"},
                ms(NOW - timedelta(hours=1)), client_id="p2"),
        message("acme", "plant/p3/temp", {"temp": 22, "site": "east"},  # older than seen_days
                ms(NOW - timedelta(days=9)), client_id="p3"),
        message("acme", "office/p4/temp", {"temp": 23, "site": "west"},  # not the source
                ms(NOW - timedelta(hours=2)), client_id="p4"),
        message("evil", "plant/e1/temp", {"temp": 99, "site": "evil"},  # another tenant
                ms(NOW - timedelta(hours=2)), client_id="e1"),
    ]  # fmt: skip
    write_live(store, rows)
    return store


def enable(api, name: str, **fields) -> None:
    body = {"name": name, "source": "plant/+/temp", "raise": "payload.temp > 90",
            "no_data_seconds": 60, "no_data_keys": "seen", "enabled": True, **fields}  # fmt: skip
    response = api.post("/api/v1/alarms", body, format="json")
    assert response.status_code == 201, response.content


def watched(name: str) -> dict[str, AlarmState]:
    return {s.key: s for s in AlarmState.objects.filter(definition__name=name)}


def test_switching_on_watches_the_keys_its_source_saw_within_seen_days(acme, archive):
    _, api = acme
    before = NOW.timestamp()
    enable(api, "silent")
    states = watched("silent")
    assert set(states) == {"p1", "p2"}
    for state in states.values():
        assert state.status == "normal"
        # watched from now: silent for 60 s from the switch, not from its last message
        assert state.machine["last_seen"] >= before
        assert machine.next_due(machine.KeyState(**state.machine),
                                machine.Timing(no_data=60)) == state.machine["last_seen"] + 60  # fmt: skip
    entry = AuditEntry.objects.filter(action="alarm.created", target="silent").get()
    assert (entry.detail["seen_keys"], entry.detail["seen_keys_complete"]) == (2, True)


def test_a_key_read_from_the_payload_is_found_by_the_alarms_own_rule(acme, archive):
    _, api = acme
    enable(api, "sites", key="payload.site")
    assert set(watched("sites")) == {"north", "south"}


def test_switched_on_later_it_looks_then_and_keeps_a_key_it_has(acme, archive):
    _, api = acme
    enable(api, "later", enabled=False)
    assert not watched("later")
    definition = AlarmDefinition.objects.get(name="later")
    AlarmState.objects.create(tenant=acme[0], definition=definition, key="p1", status="active")
    response = api.patch("/api/v1/alarms/later", {"enabled": True}, format="json")
    assert response.status_code == 200, response.content
    states = watched("later")
    assert set(states) == {"p1", "p2"} and states["p1"].status == "active"  # kept


def test_devices_mode_and_alarms_without_no_data_read_no_history(acme, archive):
    _, api = acme
    enable(api, "devices", no_data_keys="devices")
    enable(api, "plain", no_data_seconds=None)
    assert not watched("devices") and not watched("plain")

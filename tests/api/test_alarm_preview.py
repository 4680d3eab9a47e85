"""`POST /api/v1/alarms/{name}/preview` (CONTRACT.md): an alarm tried over the tenant's history
before it is switched on — raises, keys and the first transitions, from the archive's files;
another tenant's messages and alarms out of reach."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from common.stores.object_store import LocalObjectStore
from tenants.models import AlarmState, AlarmTransition
from tests.spark.conftest import message, write_live

pytestmark = pytest.mark.django_db

NOW = datetime.now(UTC).replace(microsecond=0)
START = NOW - timedelta(hours=2)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@pytest.fixture
def archive(tmp_path, monkeypatch) -> LocalObjectStore:
    """acme's pump hot for 90 s (a reading every 10 s); evil's pump on the same topic always."""
    monkeypatch.setenv("OBJECT_STORE_URL", f"file://{tmp_path}/objects")
    store = LocalObjectStore(tmp_path / "objects")
    base = int((START + timedelta(minutes=5)).timestamp() * 1000)
    rows = []
    for s in range(0, 300, 10):
        temp = 95 if 60 <= s < 150 else 20
        rows.append(
            message("acme", "plant/p1/temp", {"temp": temp}, base + s * 1000, client_id="p1")
        )
        rows.append(message("evil", "plant/p1/temp", {"temp": 99}, base + s * 1000 + 1))
    write_live(store, rows)
    return store


def define(api, name="hot", **fields):
    body = {"name": name, "source": "plant/+/temp", "raise": "payload.temp > 90",
            "for_seconds": 30, "value": "payload.temp", **fields}  # fmt: skip
    response = api.post("/api/v1/alarms", body, format="json")
    assert response.status_code == 201, response.content


def preview(api, name="hot", start=START, end=NOW):
    body = {"from": iso(start), "to": iso(end)}
    return api.post(f"/api/v1/alarms/{name}/preview", body, format="json")


def test_an_alarm_not_yet_enabled_previews_its_raises_keys_and_transitions(acme, archive):
    _, api = acme
    define(api)
    response = preview(api)
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["read"], body["considered"], body["complete"]) == (30, 30, True)
    assert (body["raised"], body["keys_raised"]) == (1, 1)
    (key,) = body["keys"]
    # hot from 60 s, held 30 s: active at 90 s; cool from 150 s, held 30 s (the raise's): 180 s
    assert (key["key"], key["raised"], key["active_seconds"], key["state_at_end"]) == (
        "p1",
        1,
        90.0,
        "normal",
    )
    assert [(t["event"], t["after"], t["value"]) for t in body["transitions"]] == [
        ("pending", "pending", 95),
        ("raise", "active", 95),
        ("clear", "normal", 20),
    ]
    # nothing stored
    assert not AlarmState.objects.exists() and not AlarmTransition.objects.exists()


def test_a_bad_range_is_a_400_naming_it(acme, archive):
    _, api = acme
    define(api)
    response = preview(api, start=NOW + timedelta(hours=1), end=NOW + timedelta(hours=2))
    assert response.status_code == 400 and "from" in response.json()["error"]["fields"]
    response = preview(api, start=NOW - timedelta(days=30))
    assert response.status_code == 400 and "to" in response.json()["error"]["fields"]


def test_another_tenant_cannot_preview_acmes_alarm_nor_read_acmes_history(acme, attacker, archive):
    _, api = acme
    define(api)
    _, evil = attacker
    assert preview(evil).status_code == 404  # acme's alarm: not evil's to preview
    define(evil)  # evil's own alarm of the same name reads only evil's messages
    body = preview(evil).json()
    assert (body["considered"], body["raised"]) == (30, 1)
    assert [k["key"] for k in body["keys"]] == ["dev-1"]

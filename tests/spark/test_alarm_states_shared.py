"""The alarms' checkpoint is one write for every tenant's keys (issue 46 under issue 44's rule:
no shared batch one tenant can fail): a hostile value beside another tenant's is made storable
when read, and a key Postgres still refuses is left out alone — the other tenant's states, the
transitions and the feed position are written."""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from django.db import connection

from common.alarms.definition import AlarmSpec
from common.alarms.machine import Timing
from common.stores.isolation import REFUSED
from spark.rules import store as db
from spark.rules.alarms import Alarm, AlarmKeeper
from spark.rules.feed import stream_id
from spark.rules.results import ResultRow
from tenants.models import AlarmDefinition, AlarmState, AlarmTransition
from tenants.tenant import services as tenant_services
from tests.spark.conftest import database_url

pytestmark = pytest.mark.django_db(transaction=True)
SPEC = AlarmSpec("plant/+/temp", "payload.temp > 90")


def _alarm(slug: str) -> Alarm:
    tenant = tenant_services.tenant_create(slug)
    definition = AlarmDefinition.objects.create(
        tenant=tenant, name="hot", source=SPEC.source, raise_condition=SPEC.raise_condition,
        enabled=True,
    )  # fmt: skip
    return Alarm(definition.id, slug, "hot", SPEC, Timing(), 1)


def _row(alarm: Alarm, key: str, value, at: float) -> ResultRow:
    out = {"alarm_key": key, "alarm_raised": True, "alarm_cleared": False, "alarm_value": value}
    return ResultRow(-alarm.id, alarm.tenant, datetime.fromtimestamp(at), 1, "passed",
                     json.dumps([out]), None, None, f"m{at}", "plant/p/temp", key,
                     f"{alarm.tenant}/p")  # fmt: skip


def test_a_hostile_key_and_value_are_stored_escaped_beside_another_tenants():
    acme, evil = _alarm("acme"), _alarm("evil")
    connection.close()
    keeper = AlarmKeeper("rules:test", lambda a, b: stream_id(a) > stream_id(b))
    keeper.alarms = {acme.id: acme, evil.id: evil}
    hostile = {"nan": float("nan"), "nul": "a\x00b", "lone": "\ud800", "deep": [float("inf")]}
    keeper.take([
        _row(acme, "pump", 95, 1000),
        _row(evil, "bad\x00key\udfff", hostile, 1000.5),
        _row(evil, "k" * 400, 99, 1001),
    ], "1001000-0")  # fmt: skip
    with db.connect(database_url()) as conn:
        assert keeper.save(conn)
    assert AlarmState.objects.get(definition_id=acme.id).value == 95
    bad = AlarmState.objects.get(definition_id=evil.id, key__startswith="bad")
    assert bad.key == "bad\\u0000key\\udfff"
    assert bad.value == {"nan": "nan", "nul": "a\\u0000b", "lone": "\\ud800", "deep": ["inf"]}
    long = AlarmState.objects.get(definition_id=evil.id, key__startswith="kkk")
    assert len(long.key) == 255 and long.status == "active"
    assert AlarmTransition.objects.count() == 3


def test_a_key_the_database_still_refuses_is_left_out_alone(monkeypatch):
    acme, evil = _alarm("acme"), _alarm("evil")
    connection.close()
    keeper = AlarmKeeper("rules:test", lambda a, b: stream_id(a) > stream_id(b))
    keeper.alarms = {acme.id: acme, evil.id: evil}
    keeper.take([_row(acme, "pump", 95, 1000), _row(evil, "pump", 99, 1000)], "1000000-0")
    row = keeper._row

    def refused_for_evil(state_key):  # what Postgres refuses: a status longer than its column
        found = row(state_key)
        return dict(found, status="x" * 40) if state_key[0] == evil.id else found

    monkeypatch.setattr(keeper, "_row", refused_for_evil)
    before = REFUSED["alarm states"]
    with db.connect(database_url()) as conn:
        assert keeper.save(conn)
        position = conn.execute(
            "SELECT evaluated FROM tenants_rulefeedposition WHERE stream = 'rules:test#alarms'"
        ).fetchone()
    assert REFUSED["alarm states"] == before + 1
    assert list(AlarmState.objects.values_list("definition_id", "status")) == [(acme.id, "active")]
    assert list(AlarmTransition.objects.values_list("definition_id", flat=True)) == [acme.id]
    assert position == ("1000000-0",)

"""Every dimension a device causes, per device (issue 33, point 1): known traffic from real paho
devices through a real broker on Postgres that archives it, a shadow update over MQTT and one
made through the REST API, the rules backfill (`manage.py run_rules`, a real Spark job) running a
rule with an action over what was archived, the control plane's rollup; then `GET
/api/v1/usage?by=device` shows each device's rule units, actions and shadow operations beside its
messages. From the attacker's side: a tenant with a device of the same name, its own rule and
traffic never sees the other's figures, nor they its."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db import connection

from tenants.accounts import services as account_services
from tenants.billing import services as billing
from tenants.devices import services as device_services
from tenants.rules import services as rule_services
from tests.api.conftest import client_for
from tests.broker.clients import Paho
from tests.spark.conftest import database_url
from tests.spark.test_end_to_end import platform  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)
SQL = 'SELECT payload.t AS t FROM "sensors/#" WHERE payload.t > 20'


def by_device(api) -> dict[str, dict]:
    today = datetime.now(UTC).date()
    response = api.get(f"/api/v1/usage?from={today}&to={today + timedelta(days=1)}&by=device")
    assert response.status_code == 200, response.content
    return {row["device"]: row for row in response.json()["devices"]}


def test_rules_actions_and_shadow_operations_per_device(platform):  # noqa: F811
    port, store, process = platform
    tenants, apis, secrets = {}, {}, {}
    for slug in ("acme", "evil"):
        tenant, _, token = account_services.signup(
            tenant=slug, email=f"owner@{slug}.io", password=f"pass-w0rd-{slug}"
        )
        tenants[slug], apis[slug] = tenant, client_for(token)
        rule_services.rule_create(
            tenant=tenant, name="hot", sql=SQL, actions=[{"type": "dataset", "name": "hot"}]
        )
    for slug, name in (("acme", "sensor-a"), ("acme", "sensor-b"), ("evil", "sensor-a")):
        _, secrets[(slug, name)] = device_services.device_create(
            tenant=tenants[slug], name=name, client_id_policy="any"
        )
    connection.close()
    start = datetime.now(UTC) - timedelta(minutes=1)

    a = Paho(port, "acme/sensor-a", secrets[("acme", "sensor-a")], "a-1")
    b = Paho(port, "acme/sensor-b", secrets[("acme", "sensor-b")], "b-1")
    spy = Paho(port, "evil/sensor-a", secrets[("evil", "sensor-a")], "a-1")
    a.subscribe("$aws/things/sensor-a/shadow/update/accepted", 1)
    b.subscribe("$aws/things/sensor-b/shadow/update/accepted", 1)
    # acme: sensor-a 2 messages of 1 unit (one over 20: one action); sensor-b one of 2 units
    # (6,000 bytes and more), over 20: one action.
    a.publish("sensors/a", json.dumps({"t": 10}), 1)
    a.publish("sensors/a", json.dumps({"t": 21}), 1)
    b.publish("sensors/b", json.dumps({"t": 30, "pad": "x" * 6_000}), 1)
    # sensor-b updates its own shadow over MQTT; the REST API updates sensor-a's: each is an
    # operation on that thing's shadow, counted to it whoever asked.
    b.publish(
        "$aws/things/sensor-b/shadow/update", json.dumps({"state": {"reported": {"t": 1}}}), 1
    )
    changed = apis["acme"].post(
        "/api/v1/devices/sensor-a/shadow",
        {"state": {"desired": {"on": True}}},
        format="json",
    )
    assert changed.status_code in (200, 201), changed.content
    assert len(a.expect(1, 10)) == 1 and len(b.expect(1, 10)) == 1  # both served by the broker
    for t in (1000, 1001, 1002):  # evil's own device of the same name: 3 units, 3 actions
        spy.publish("sensors/a", json.dumps({"t": t}), 1)
    for client in (a, b, spy):
        client.close()
    process.terminate()  # a graceful stop flushes the meter and uploads the open segment
    assert process.wait(timeout=20) == 0

    end = datetime.now(UTC) + timedelta(minutes=1)
    done = subprocess.run(
        [sys.executable, "manage.py", "run_rules", "--no-progress"]
        + ["--from", start.isoformat(), "--to", end.isoformat()],
        cwd=settings.BASE_DIR,
        env=dict(os.environ, DATABASE_URL=database_url()),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["actions_ok"] == 5
    rolled = billing.usage_log_rollup(store=store)
    assert rolled["segments"] >= 2  # the job's usage segment and its device segment
    assert billing.usage_log_rollup(store=store)["segments"] == 0  # each once

    acme = by_device(apis["acme"])
    assert set(acme) == {"sensor-a", "sensor-b"}
    figures = ("rules_triggered", "actions_executed", "shadow_operations")
    assert {name: tuple(acme[name][f] for f in figures) for name in acme} == {
        "sensor-a": (2, 1, 1),
        "sensor-b": (2, 1, 1),
    }
    assert acme["sensor-a"]["messages"] > 0 and acme["sensor-b"]["connection_minutes"] == 1
    evil = by_device(apis["evil"])
    assert {name: tuple(evil[name][f] for f in figures) for name in evil} == {"sensor-a": (3, 3, 0)}
    # The tenant's own totals hold the same work: the devices split it, nothing more.
    tenant_rules = sum(
        point["rules_triggered"]
        for point in apis["acme"]
        .get(
            f"/api/v1/usage?from={start.date()}&to={end.date() + timedelta(days=1)}&granularity=day"
        )
        .json()["series"]
    )
    assert tenant_rules == 4

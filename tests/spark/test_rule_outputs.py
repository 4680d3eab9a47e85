"""A FOREACH fan-out from the attacker's side (issue 29, point 4): one device message with a rule
`FOREACH` over 20,000 elements and a republish used to make 20,000 deliveries in 3 s on a plan
limited to 100 msg/s. A rule's outputs per message are now bounded by the plan's
`max_rule_outputs` (100 on the free plan; an operator may override it per tenant): over it, the
message fails, dead-lettered with the reason and metered as evaluated, with no action run. The
victim's republishes, on the same broker and job, all arrive. The dry run applies the same
plan value."""

from __future__ import annotations

import json
import time

import pytest
from django.db import connection

from spark.archive import spark_schema
from spark.rules.actions import ActionRunner
from spark.rules.live import LiveJob
from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.models import RuleDeadLetter
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.api.conftest import client_for
from tests.broker.clients import Paho
from tests.spark.conftest import database_url, message, rule_usage, write_live
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)
KEY = "rules-outputs-test-key"


@pytest.fixture
def broker(monkeypatch):
    monkeypatch.setenv("MQTT_SERVICE_KEY", KEY)
    process, port = start_pg_broker()
    yield port
    process.terminate()
    process.wait(timeout=10)


def test_a_fan_out_is_bounded_by_the_plan(spark, store, broker, tmp_path):
    evil = tenant_services.tenant_create("evil")
    victim = tenant_services.tenant_create("victim")
    _, evil_secret = device_services.device_create(tenant=evil, name="w", client_id_policy="any")
    _, victim_secret = device_services.device_create(
        tenant=victim, name="w", client_id_policy="any"
    )
    republish = [{"type": "republish", "topic": "out/${i}", "qos": 0}]
    fan = rule_services.rule_create(
        tenant=evil, name="fan", sql='FOREACH [1..20000] AS i DO i FROM "t/#"', actions=republish
    )
    rule_services.rule_create(
        tenant=victim,
        name="fwd",
        sql='SELECT payload.n AS i FROM "s/#"',
        actions=republish,
    )
    connection.close()
    attacker_sees = Paho(broker, "evil/w", evil_secret, "watch-evil")
    attacker_sees.subscribe("out/#", 0)
    victim_sees = Paho(broker, "victim/w", victim_secret, "watch-victim")
    victim_sees.subscribe("out/#", 0)
    runner = ActionRunner(store, mqtt_port=broker, service_key=KEY.encode())
    job = LiveJob(spark, database_url(), store, checkpoint=tmp_path / "c", runner=runner)
    try:
        now = int(time.time() * 1000)
        rows = [message("evil", "t/1", {}, now)]
        rows += [message("victim", f"s/{n}", {"n": n}, now + n) for n in range(20)]
        key = write_live(store, rows)
        job.handle_batch(spark.read.schema(spark_schema()).parquet(str(store.root / key)), 1)
        got = victim_sees.expect(20, 20)
        assert sorted(int(m.topic.split("/")[1]) for m in got) == list(range(20))
        assert attacker_sees.nothing(1.0)  # not one of the 20,000
    finally:
        job.stop()
    (letter,) = RuleDeadLetter.objects.filter(rule=fan)
    assert "(outputs)" in letter.error and "max_rule_outputs" in letter.error
    assert rule_usage(store, "evil") == (1, 0)  # the message evaluated is billed; no action ran
    assert rule_usage(store, "victim") == (20, 20)


def test_the_plan_value_and_its_override_apply_to_the_dry_run(db):
    tenant, _, token = account_services.signup(
        tenant="acme", email="owner@acme.io", password="pass-w0rd-acme"
    )
    api = client_for(token)
    body = {"sql": 'FOREACH [1..150] AS i DO i FROM "#"', "context": {"topic": "t"}}
    refused = api.post("/api/v1/rules/test", body, format="json")
    assert refused.status_code == 400
    assert "more than 100 outputs" in refused.json()["error"]["message"]
    tenant_services.tenant_set_quota(tenant, {"max_rule_outputs": 200})
    answer = api.post("/api/v1/rules/test", body, format="json").json()
    assert len(answer["outputs"]) == 150
    assert api.get("/api/v1/quota").json()["limits"]["max_rule_outputs"] == 200
    assert json.dumps(answer["outputs"][0]) == '{"i": 1}'

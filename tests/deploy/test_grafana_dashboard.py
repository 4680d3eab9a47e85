"""The Grafana dashboard shipped in `docker/grafana/` queries only metrics a live broker serves:
every metric name in every panel's PromQL (and the tenant variable's) appears on the `/metrics`
of a real broker process on the test database, with samples once traffic and a refusal passed."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.tenancy.test_refusals import broker_with_metrics

pytestmark = pytest.mark.django_db(transaction=True)
DASHBOARD = Path(__file__).resolve().parents[2] / "docker" / "grafana" / "mqtt-broker.json"
PROMQL_FUNCTIONS = {"sum", "rate", "by", "label_values", "max", "min", "avg", "without"}


def queried_metrics(dashboard: dict) -> set[str]:
    expressions = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    expressions += [
        v["definition"] for v in dashboard["templating"]["list"] if v.get("type") == "query"
    ]
    names = set()
    for expr in expressions:
        # Drop label matchers and ranges, then keep the identifiers that are not functions.
        bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]|\"[^\"]*\"", " ", expr)
        for name in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare):
            if name not in PROMQL_FUNCTIONS and name.startswith("mqtt_"):
                names.add(name)
    return names


def served(port: int) -> dict[str, set[str]]:
    """Sample names on /metrics, by family (a family's samples: `name_total`, …)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        family.name: {sample.name for sample in family.samples}
        for family in text_string_to_metric_families(text)
    }


def test_every_metric_the_dashboard_queries_is_served_by_a_live_broker(tmp_path):
    dashboard = json.loads(DASHBOARD.read_text())
    wanted = queried_metrics(dashboard)
    assert {"mqtt_refusals_total", "mqtt_messages_received_total"} <= wanted, wanted
    assert len(dashboard["panels"]) >= 8

    tenant = tenant_services.tenant_create("graphed")
    _, secret = device_services.device_create(
        tenant=tenant, name="sensor-1", client_id_policy="any"
    )
    tenant_services.tenant_set_quota(tenant, {"max_subscriptions_per_client": 1})
    with broker_with_metrics(tmp_path / "broker.log") as ports:
        client = Paho(ports["mqtt"], "graphed/sensor-1", secret, "g1")
        client.subscribe("t/#", 1)
        client.publish("t/x", "hello", 1)
        client.expect(1)
        wrong = Paho(ports["mqtt"], "graphed/sensor-1", "wrong", "g2")
        wrong.close()
        assert client.subscribe("u/#", 0)[0].value == 0x97  # a quota refusal
        samples = served(ports["metrics"])
        client.close()
    every_sample = set().union(*samples.values())
    missing = sorted(name for name in wanted if name not in every_sample)
    assert not missing, f"the dashboard queries metrics the broker does not serve: {missing}"

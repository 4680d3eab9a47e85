"""History policies through the REST API, as a tenant and as an attacker uses it: what a tenant
keeps and for how long (`GET, POST /api/v1/history-policies`, `DELETE …/{id}`), the plan's limits
as clear 400s, and another tenant's policies out of reach (404)."""

import json

import pytest
from django.contrib.auth import get_user_model

from tenants.accounts import services as account_services
from tenants.models import HistoryPolicy, Membership
from tenants.tenant import services as tenant_services
from tests.api.conftest import client_for

pytestmark = pytest.mark.django_db

URL = "/api/v1/history-policies"


@pytest.fixture(autouse=True)
def _store(tmp_path, monkeypatch):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())


def add(api, topic_filter="sensors/#", days=1, **extra):
    # JSON as a client sends it, escapes included (a lone surrogate is `\\ud800` on the wire)
    body = json.dumps({"topic_filter": topic_filter, "days": days, **extra})
    return api.post(URL, body, content_type="application/json")


def results(response) -> list[dict]:
    body = response.json()
    return body["results"] if isinstance(body, dict) else body


def test_a_tenant_keeps_a_topic_lists_and_deletes_its_policy(acme):
    _, api = acme
    created = add(api, "sensors/+/temperature", 1)
    assert created.status_code == 201, created.content
    policy = created.json()
    assert policy["topic_filter"] == "sensors/+/temperature" and policy["days"] == 1
    assert [p["id"] for p in results(api.get(URL))] == [policy["id"]]
    assert api.get(f"{URL}/{policy['id']}").json() == policy
    summary = api.get("/api/v1/history").json()
    assert summary["policies"] == 1 and summary["retention_days"] == 1
    assert summary["max_days"] == 1 and summary["default_days"] == 0  # the free plan
    assert api.delete(f"{URL}/{policy['id']}").status_code == 204
    assert results(api.get(URL)) == []
    assert api.get("/api/v1/history").json()["retention_days"] == 0


@pytest.mark.parametrize(
    "topic_filter, days, field, words",
    [
        ("sensors/#/x", 1, "topic_filter", "Not a valid MQTT topic filter"),
        ("a/b+", 1, "topic_filter", "Not a valid MQTT topic filter"),
        ("", 1, "topic_filter", ""),
        ("$SYS/#", 1, "topic_filter", "broker's own"),
        ("$share/g/a", 1, "topic_filter", "broker's own"),
        ("$events/nothing_such", 1, "topic_filter", "$events/client_connected"),
        ("a/\ud800", 1, "topic_filter", "Surrogate characters are not allowed"),
        ("a/\x00", 1, None, "NUL characters"),  # refused by the API's JSON parser
        ("x" * 257, 1, "topic_filter", "256"),
        ("sensors/#", 2, "days", "Your plan (Free) keeps history at most 1 day"),
        ("sensors/#", 10**30, "days", "max_history_days"),
        ("sensors/#", 0, "days", "at least 1 day"),
        ("sensors/#", -3, "days", "at least 1 day"),
        ("sensors/#", "seven", "days", "valid integer"),
        ("sensors/#", None, "days", ""),
    ],
)
def test_a_bad_policy_is_a_400_that_names_the_problem(acme, topic_filter, days, field, words):
    _, api = acme
    response = add(api, topic_filter, days)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert field is None or set(error["fields"]) == {field}
    assert words in error["message"]
    assert not HistoryPolicy.objects.exists()


def test_limits_come_from_the_plan_and_its_overrides(acme):
    tenant, api = acme
    assert add(api, "a/#").status_code == 201
    duplicate = add(api, "a/#")
    assert duplicate.status_code == 400 and "already" in duplicate.json()["error"]["message"]
    for n in range(4):  # the free plan allows 5
        assert add(api, f"b/{n}").status_code == 201
    over = add(api, "c/#")
    assert over.status_code == 400
    assert "allows 5 history policies (max_history_policies)" in over.json()["error"]["message"]
    tenant_services.tenant_set_quota(tenant, {"max_history_days": 30, "max_history_policies": 6})
    assert add(api, "c/#", 30).status_code == 201
    quota = api.get("/api/v1/quota").json()["limits"]
    assert quota["max_history_days"] == 30 and quota["max_history_policies"] == 6
    tenant_services.tenant_change_plan(
        tenant, "pro"
    )  # the paid plan: a week by default, 90 days max
    summary = api.get("/api/v1/history").json()
    assert summary["default_days"] == 7 and summary["default_applies"] is False  # it has policies
    assert summary["retention_days"] == 30


def test_unknown_fields_are_refused(acme):
    _, api = acme
    response = add(api, retention="forever")
    assert response.status_code == 400 and "retention" in response.json()["error"]["fields"]


def test_another_tenants_policies_are_not_found(acme, attacker):
    _, api = acme
    _, evil = attacker
    mine = add(api, "secret/#").json()
    assert evil.get(f"{URL}/{mine['id']}").status_code == 404
    assert evil.delete(f"{URL}/{mine['id']}").status_code == 404
    assert results(evil.get(URL)) == []
    assert evil.get(f"{URL}/{2**63}").status_code == 404
    assert "secret" not in str(evil.get("/api/v1/history").json())
    assert HistoryPolicy.objects.filter(id=mine["id"]).exists()
    # The same filter is the attacker's own business: its policy is its own.
    assert add(evil, "secret/#").status_code == 201
    assert [p["id"] for p in results(api.get(URL))] == [mine["id"]]


def test_a_viewer_reads_but_does_not_change_policies(acme):
    tenant, api = acme
    policy = add(api).json()
    viewer = get_user_model().objects.create_user("v@acme.io", "v@acme.io", "pass-w0rd-view")
    Membership.objects.create(user=viewer, tenant=tenant, role="viewer")
    _, token = account_services.api_token_create(user=viewer, tenant=tenant)
    read_only = client_for(token)
    assert [p["id"] for p in results(read_only.get(URL))] == [policy["id"]]
    assert add(read_only, "other/#").status_code == 403
    assert read_only.delete(f"{URL}/{policy['id']}").status_code == 403


def test_the_summary_stands_when_the_object_store_is_away(acme, monkeypatch):
    _, api = acme
    monkeypatch.setenv("OBJECT_STORE_URL", "s3://no-such-bucket/x")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    response = api.get("/api/v1/history")
    assert response.status_code == 200
    assert response.json()["history_bytes"] is None and response.json()["retention_days"] == 0

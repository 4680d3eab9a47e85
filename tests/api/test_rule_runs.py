"""A rule over the tenant's history through the API, as a tenant and as an attacker drive it:
the preview's figures and first outputs (DuckDB over the archive, no Spark), what a bad request
is told, who may run, one run of a rule at a time, cancelling a queued run, and another tenant
with the same topics: its history, rule names and run ids stay out of reach (404s)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import boto3
import pytest

from common.rule_preview import scan
from common.stores.object_store import LocalObjectStore, open_object_store
from tenants.accounts import services as account_services
from tenants.models import Membership, RuleRun
from tenants.rules import services as rule_services
from tenants.rules.runs import services as runs
from tests.api.conftest import client_for
from tests.spark.conftest import message, write_live

pytestmark = pytest.mark.django_db

SQL = 'SELECT payload.temp AS t, clientid FROM "sensors/+/temp" WHERE payload.temp > 30'
NOW = datetime.now(UTC).replace(microsecond=0)
DAY_AGO = NOW - timedelta(days=1)


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


@pytest.fixture
def archive(tmp_path, monkeypatch) -> LocalObjectStore:
    """Both tenants published to the same topics in the last day; the broker wrote segments
    holding both (as live segments do)."""
    monkeypatch.setenv("OBJECT_STORE_URL", f"file://{tmp_path}/objects")
    store = LocalObjectStore(tmp_path / "objects")
    base = int((NOW - timedelta(hours=2)).timestamp() * 1000)
    rows = []
    for i in range(40):
        rows.append(message("acme", "sensors/kitchen/temp", {"temp": i}, base + i, client_id="k1"))
        rows.append(message("evil", "sensors/kitchen/temp", {"temp": 99}, base + i))
    rows.append(message("acme", "sensors/kitchen/hum", {"temp": 99}, base + 50))  # not FROM's
    rows.append(message("acme", "sensors/bad/temp", b"not json", base + 60))  # fails
    write_live(store, rows)
    return store


@pytest.fixture
def no_dispatch(monkeypatch):
    """Runs stay queued: these tests look at the API, not at Spark (tests/spark runs them)."""
    dispatched = []
    monkeypatch.setattr(runs, "dispatch", dispatched.append)
    return dispatched


def preview(api, name="hot", start=DAY_AGO, end=NOW, **extra):
    body = {"from": iso(start), "to": iso(end), **extra}
    return api.post(f"/api/v1/rules/{name}/runs", body, format="json")


def test_preview_counts_the_range_and_shows_the_first_outputs(acme, archive):
    tenant, api = acme
    rule_services.rule_create(tenant=tenant, name="hot", sql=SQL)
    response = preview(api)
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["mode"] == "preview"
    assert (body["read"], body["considered"], body["matched"], body["failed"]) == (42, 41, 9, 1)
    assert body["complete"] is True
    assert body["outputs"][:3] == [
        {"t": 31, "clientid": "k1"},
        {"t": 32, "clientid": "k1"},
        {"t": 33, "clientid": "k1"},
    ]
    assert len(body["outputs"]) == 9
    # nothing was stored, queued or fired
    assert not RuleRun.objects.exists()


def test_a_preview_over_s3_answers_the_same_within_its_memory_bound(
    acme, archive, s3_endpoint, monkeypatch
):
    """The same archive in an S3-compatible store (moto): the same figures; past the rows a web
    process holds (`REMOTE_MAX_BYTES`), a 400 that says what to do, never an exhausted worker."""
    tenant, api = acme
    rule_services.rule_create(tenant=tenant, name="hot", sql=SQL)
    local = preview(api).json()
    bucket = f"preview-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=bucket)
    monkeypatch.setenv("OBJECT_STORE_URL", f"s3://{bucket}/mqtt")
    remote = open_object_store()
    for key in archive.list(""):
        remote.put(key, archive.get(key))
    answer = preview(api).json()
    assert [answer[k] for k in ("read", "matched", "failed", "outputs")] == [
        local[k] for k in ("read", "matched", "failed", "outputs")
    ]
    monkeypatch.setattr(scan, "REMOTE_MAX_BYTES", 1000)  # acme's 42 rows hold more
    refused = preview(api)
    assert refused.status_code == 400, refused.content
    words = json.dumps(refused.json()["error"]["fields"]["from"])
    assert "narrow it, or start a run" in words


def test_a_range_without_history_previews_as_zeros(acme, archive):
    tenant, api = acme
    rule_services.rule_create(tenant=tenant, name="hot", sql=SQL)
    body = preview(api, start=NOW - timedelta(days=3), end=NOW - timedelta(days=2)).json()
    assert (body["read"], body["matched"], body["outputs"]) == (0, 0, [])


@pytest.mark.parametrize(
    "body, field, words",
    [
        ({"to": "2026-01-01T00:00:00Z"}, "from", "required"),
        ({"from": "yesterday", "to": "2026-01-01T00:00:00Z"}, "from", "format"),
        ({"from": iso(NOW - timedelta(hours=1)), "to": iso(DAY_AGO)}, "to", "after"),
        ({"from": iso(NOW - timedelta(days=9)), "to": iso(NOW)}, "to", "7 days"),
        (
            {"from": iso(NOW + timedelta(days=1)), "to": iso(NOW + timedelta(days=2))},
            "from",
            "future",
        ),
        ({"from": iso(DAY_AGO), "to": iso(NOW), "mode": "replay"}, "mode", "valid choice"),
        ({"from": iso(DAY_AGO), "to": iso(NOW), "actions": "some"}, "actions", "valid choice"),
        ({"from": iso(DAY_AGO), "to": iso(NOW), "limit": 5}, "limit", "Unknown field"),
    ],
)
def test_a_bad_request_is_a_400_naming_the_problem(acme, archive, body, field, words):
    tenant, api = acme
    rule_services.rule_create(tenant=tenant, name="hot", sql=SQL)
    response = api.post("/api/v1/rules/hot/runs", body, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert field in error["fields"]
    assert words in json.dumps(error["fields"][field])


def test_previews_are_throttled_per_tenant(acme, archive, settings):
    settings.RULE_PREVIEW_RATE = "2/min"
    tenant, api = acme
    rule_services.rule_create(tenant=tenant, name="hot", sql=SQL)
    assert [preview(api).status_code for _ in range(2)] == [200, 200]
    third = preview(api)
    assert third.status_code == 429
    assert "try again" in third.json()["error"]["message"]


def test_a_run_is_queued_followed_and_cancelled(
    acme, archive, no_dispatch, django_capture_on_commit_callbacks
):
    tenant, api = acme
    rule = rule_services.rule_create(tenant=tenant, name="hot", sql=SQL)
    with django_capture_on_commit_callbacks(execute=True):  # dispatched once committed
        response = preview(api, mode="run", actions="all")
    assert response.status_code == 202, response.content
    run = response.json()
    assert run["state"] == "queued" and run["actions"] == "all" and run["rule_version"] == 1
    assert [str(r.id) for r in no_dispatch] == [run["id"]]
    # One run of a rule at a time.
    again = preview(api, mode="run")
    assert again.status_code == 409 and run["id"] in again.json()["error"]["message"]
    assert again.json()["error"]["run"]["cancel"] == f"/api/v1/rules/hot/runs/{run['id']}/cancel"
    shown = api.get(f"/api/v1/rules/hot/runs/{run['id']}").json()
    assert (shown["state"], shown["progress"], shown["read"]) == ("queued", 0.0, 0)
    assert api.get("/api/v1/rules/hot/runs").json()["results"][0]["id"] == run["id"]
    cancelled = api.post(f"/api/v1/rules/hot/runs/{run['id']}/cancel")
    assert cancelled.status_code == 202 and cancelled.json()["state"] == "cancelled"
    twice = api.post(f"/api/v1/rules/hot/runs/{run['id']}/cancel")
    assert twice.status_code == 409 and "cancelled already" in twice.json()["error"]["message"]
    # A new run may start now; the default is new-only.
    assert preview(api, mode="run").json()["actions"] == "new-only"
    assert rule.runs.count() == 2


def test_a_viewer_may_preview_but_not_run(acme, archive, no_dispatch):
    tenant, api = acme
    rule_services.rule_create(tenant=tenant, name="hot", sql=SQL)
    from django.contrib.auth import get_user_model

    viewer = get_user_model().objects.create_user("v@acme.io", "v@acme.io", "pass-w0rd-view")
    Membership.objects.create(user=viewer, tenant=tenant, role="viewer")
    token = account_services.api_token_create(user=viewer, tenant=tenant, name="ro")[1]
    reader = client_for(token)
    assert preview(reader).status_code == 200
    refused = preview(reader, mode="run")
    assert refused.status_code == 403 and "viewer" in refused.json()["error"]["message"]
    assert not RuleRun.objects.exists()


def test_a_stale_run_whose_worker_died_does_not_block_its_rule(acme, archive, no_dispatch):
    tenant, api = acme
    rule_services.rule_create(tenant=tenant, name="hot", sql=SQL)
    run_id = preview(api, mode="run").json()["id"]
    RuleRun.objects.filter(id=run_id).update(
        state="running", heartbeat_at=NOW - timedelta(minutes=10)
    )
    assert preview(api, mode="run").status_code == 202
    stale = api.get(f"/api/v1/rules/hot/runs/{run_id}").json()
    assert stale["state"] == "failed" and "worker" in stale["error"]


def test_another_tenant_never_sees_acmes_history_rules_or_runs(
    acme, attacker, archive, no_dispatch
):
    tenant, api = acme
    evil, evil_api = attacker
    rule_services.rule_create(tenant=tenant, name="hot", sql=SQL)
    run_id = preview(api, mode="run").json()["id"]
    # acme's rule name, and acme's run id under a rule of its own with the same name: 404s.
    assert preview(evil_api).status_code == 404
    rule_services.rule_create(tenant=evil, name="hot", sql=SQL)
    assert evil_api.get(f"/api/v1/rules/hot/runs/{run_id}").status_code == 404
    assert evil_api.post(f"/api/v1/rules/hot/runs/{run_id}/cancel").status_code == 404
    assert evil_api.get("/api/v1/rules/hot/runs").json()["results"] == []
    assert evil_api.get("/api/v1/rules/hot/runs/not-a-uuid").status_code == 404
    # Same topics, any range: evil's preview counts evil's messages only.
    for start, end in ((DAY_AGO, NOW), (NOW - timedelta(days=7), NOW)):
        body = preview(evil_api, start=start, end=end).json()
        assert (body["read"], body["matched"]) == (40, 40)
        assert {o["clientid"] for o in body["outputs"]} == {"dev-1"}
    assert RuleRun.objects.get(id=run_id).state == "queued"


def test_saving_sql_or_actions_makes_a_new_rule_version(acme):
    tenant, api = acme
    rule = rule_services.rule_create(tenant=tenant, name="hot", sql=SQL)
    assert rule.version == 1
    assert rule_services.rule_update(rule, enabled=False).version == 1
    assert rule_services.rule_update(rule, sql=SQL.replace("30", "31")).version == 2
    hook = [{"type": "dataset", "name": "hot"}]
    assert rule_services.rule_update(rule, actions=hook).version == 3
    assert rule_services.rule_update(rule, actions=hook, sql=rule.sql).version == 3


def test_a_run_may_fire_one_action_of_the_rule_only(acme, attacker, archive, no_dispatch):
    tenant, api = acme
    _, evil_api = attacker
    two = [{"type": "dataset", "name": "hot"}, {"type": "dataset", "name": "warm"}]
    rule_services.rule_create(tenant=tenant, name="hot", sql=SQL, actions=two)
    for bad, words in ((3, "no action 3: its actions are 1 to 2"), (0, "greater than or equal")):
        response = preview(api, mode="run", action=bad)
        assert response.status_code == 400, response.content
        assert words in json.dumps(response.json()["error"]["fields"]["action"])
    assert not RuleRun.objects.exists()
    response = preview(api, mode="run", action=2)
    assert response.status_code == 202, response.content
    run = response.json()
    assert run["action"] == 2 and RuleRun.objects.get(id=run["id"]).only_action == 2
    assert api.get(f"/api/v1/rules/hot/runs/{run['id']}").json()["action"] == 2
    # Another tenant cannot aim at acme's rule; a run without `action` fires every action.
    assert preview(evil_api, mode="run", action=1).status_code == 404
    api.post(f"/api/v1/rules/hot/runs/{run['id']}/cancel")
    assert preview(api, mode="run").json()["action"] is None

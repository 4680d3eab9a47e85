"""Sinks through the REST API (issue 47), on real Postgres: rules take the sink actions (a 400
names the action and the field), their credentials sealed in the row, hidden from everyone once
saved and kept when the rule is saved back as it was shown; `GET /api/v1/sinks` lists each sink
with the state and outbox the rules job writes (inserted here with the SQL it will use, naming
only its columns); `POST /api/v1/rules/{name}/actions/{n}/test` runs the writers' connection
test on the stored action, against moto's S3 when `common.sinks` is installed. From the
attacker's side: another tenant never sees, tests or learns anything of someone's sink."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import override_settings

from common.contracts import tables
from common.contracts.rule_actions import REDACTED
from tenants.accounts import login_tokens
from tenants.models import Membership, Rule
from tenants.rules.services import rules_reseal_secrets
from tests.api.conftest import acme, attacker, client_for  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db

SQL = 'SELECT payload.temp AS temp, clientid FROM "sensors/+/temp"'
AWS_SECRET = "aws-secret-only-acme-knows"
PG_PASSWORD = "pg-password-only-acme-knows"
BRIDGE_PASSWORD = "bridge-password-only-acme-knows"
S3 = {
    "type": "s3",
    "bucket": "acme-telemetry",
    "prefix": "raw/",
    "access_key_id": "AKIAACME",
    "secret_access_key": AWS_SECRET,
}
POSTGRES = {
    "type": "postgres",
    "dsn": f"postgresql://writer:{PG_PASSWORD}@db.example.com/telemetry",
    "table": "readings",
    "columns": {"device": "${clientid}", "temp": "${temp}"},
}
BRIDGE = {
    "type": "mqtt_bridge",
    "host": "broker.example.com",
    "port": 8883,
    "tls": True,
    "username": "bridge",
    "password": BRIDGE_PASSWORD,
    "topic": "site/${clientid}",
}
REPUBLISH = {"type": "republish", "topic": "out/${clientid}"}
SECRETS = (AWS_SECRET, PG_PASSWORD, BRIDGE_PASSWORD)


@pytest.fixture(autouse=True)
def _sealing_key(monkeypatch):
    monkeypatch.setenv("SEALING_KEY", "the-platforms-sealing-key-" + "k" * 40)
    monkeypatch.delenv("SEALING_KEY_PREVIOUS", raising=False)
    monkeypatch.delenv("WEBHOOK_ALLOW", raising=False)


def make_rule(api, name="hot", actions=None):
    """The rule as the API answers, with its id (the newest rule of that name: this one)."""
    body = {"name": name, "sql": SQL, "actions": actions or [REPUBLISH, S3, POSTGRES, BRIDGE]}
    response = api.post("/api/v1/rules", body, format="json")
    assert response.status_code == 201, response.content
    return {**response.json(), "id": Rule.objects.filter(name=name).latest("id").id}


def stored_actions(name="hot") -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT actions::text FROM {tables.RULE} WHERE name = %s", [name])
        return cursor.fetchone()[0]


def queue(tenant, rule_id, index, n=1, key="d1"):
    """Outputs queued as the rules job will queue them: its columns only, the rest defaults."""
    with connection.cursor() as cursor:
        for i in range(n):
            cursor.execute(
                f"INSERT INTO {tables.SINK_OUTBOX} (tenant_id, rule_id, action_index, key, body, "
                "ts_ms, ledger_key, topic, client_id) VALUES (%s, %s, %s, %s, %s, %s, '', "
                "'sensors/d1/temp', 'd1')",
                [tenant.id, rule_id, index, key, json.dumps({"temp": i}), 1_700_000_000_000 + i],
            )


def set_state(tenant, rule_id, index, state, error="", delivered=0, dead=0):
    """A sink's state as the rules job will upsert it."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {tables.SINK_STATE} (tenant_id, rule_id, action_index, state, "
            "last_error, last_error_at, delivered, dead) VALUES (%s, %s, %s, %s, %s, "
            "CASE WHEN %s <> '' THEN now() END, %s, %s) ON CONFLICT (rule_id, action_index) DO "
            "UPDATE SET state = EXCLUDED.state, last_error = EXCLUDED.last_error, "
            "delivered = EXCLUDED.delivered, dead = EXCLUDED.dead, updated_at = now()",
            [tenant.id, rule_id, index, state, error, error, delivered, dead],
        )


# -- the actions -------------------------------------------------------------------------------


def test_a_rule_takes_sinks_sealed_and_shown_without_credentials(acme):  # noqa: F811
    tenant, api = acme
    body = make_rule(api)
    text = json.dumps(body)
    assert not any(secret in text for secret in SECRETS)
    republish, s3, postgres, bridge = body["actions"]
    assert s3 == {**S3, "format": "jsonl", "secret_access_key": REDACTED}
    assert postgres["dsn"] == f"postgresql://writer:{REDACTED}@db.example.com/telemetry"
    assert bridge["password"] == REDACTED and bridge["username"] == "bridge"
    # In the row every credential is sealed; the platform itself opens them.
    row = stored_actions()
    assert not any(secret in row for secret in SECRETS)
    assert row.count("sealed:v1:") == 3
    opened = Rule.objects.get(tenant=tenant, name="hot").actions
    assert opened[1]["secret_access_key"] == AWS_SECRET
    assert opened[2]["dsn"] == POSTGRES["dsn"]


def test_a_rule_saved_back_as_shown_keeps_its_credentials_and_version(acme):  # noqa: F811
    tenant, api = acme
    shown = make_rule(api)
    version = Rule.objects.get(tenant=tenant, name="hot").version
    response = api.patch("/api/v1/rules/hot", {"actions": shown["actions"]}, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["actions"] == shown["actions"]
    assert Rule.objects.get(tenant=tenant, name="hot").version == version  # nothing changed
    assert Rule.objects.get(tenant=tenant, name="hot").actions[1:] == [
        {**S3, "format": "jsonl"},
        POSTGRES,
        BRIDGE,
    ]
    # Moved to another endpoint, the hidden key does not follow: the request says so.
    moved = [shown["actions"][0], {**shown["actions"][1], "endpoint_url": "https://evil.example"}]
    refused = api.patch("/api/v1/rules/hot", {"actions": moved}, format="json")
    assert refused.status_code == 400
    message = refused.json()["error"]["fields"]["actions"][0]
    assert message.startswith("Action 2: secret_access_key is hidden")


@pytest.mark.parametrize(
    "action, words",
    [
        ({"type": "s3", "bucket": "Not_A_Bucket"}, "Action 2: bucket must be an S3 bucket name"),
        (
            {"type": "sqs", "queue_url": "http://169.254.169.254/1/q"},
            "Action 2: queue_url 'http://169.254.169.254/1/q': 169.254.169.254 is a link-local",
        ),
        (
            {"type": "postgres", "dsn": "postgresql://u:p@10.0.0.5/db", "table": "t"},
            "Action 2: dsn's host 10.0.0.5:5432",
        ),
        (
            {"type": "mqtt_bridge", "host": "localhost", "port": 1883, "topic": "t"},
            "Action 2: host localhost:1883: localhost is this machine",
        ),
        ({"type": "kinesis", "stream": "s", "partition_key": "${"}, "Action 2: partition_key"),
    ],
)
def test_a_bad_sink_is_a_400_naming_the_action_and_field(acme, action, words):  # noqa: F811
    _, api = acme
    body = {"name": "bad", "sql": SQL, "actions": [REPUBLISH, action]}
    response = api.post("/api/v1/rules", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["fields"]["actions"][0].startswith(words)


def test_reseal_secrets_reseals_the_sinks_credentials(acme, monkeypatch):  # noqa: F811
    _, api = acme
    make_rule(api)
    before = stored_actions()
    monkeypatch.setenv("SEALING_KEY_PREVIOUS", "the-platforms-sealing-key-" + "k" * 40)
    monkeypatch.setenv("SEALING_KEY", "a-new-sealing-key-" + "n" * 40)
    counts = rules_reseal_secrets()
    assert (counts["resealed"], counts["unopened"]) == (3, 0)
    assert stored_actions() != before
    monkeypatch.delenv("SEALING_KEY_PREVIOUS")
    assert Rule.objects.get(name="hot").actions[3]["password"] == BRIDGE_PASSWORD


# -- GET /api/v1/sinks -------------------------------------------------------------------------


def test_the_list_has_each_sink_with_its_state_and_outbox(acme):  # noqa: F811
    tenant, api = acme
    rule_id = make_rule(api)["id"]
    queue(tenant, rule_id, 1, n=3)
    set_state(tenant, rule_id, 1, "retrying", error="S3: the bucket does not exist", dead=2)
    set_state(tenant, rule_id, 3, "ok", delivered=40)
    response = api.get("/api/v1/sinks")
    assert response.status_code == 200
    rows = response.json()["results"]
    assert [(r["rule"], r["action"], r["type"]) for r in rows] == [
        ("hot", 2, "s3"),
        ("hot", 3, "postgres"),
        ("hot", 4, "mqtt_bridge"),
    ]
    s3, postgres, bridge = rows
    assert s3["state"] == "retrying" and s3["outbox_depth"] == 3 and s3["oldest_at"]
    assert s3["last_error"] == "S3: the bucket does not exist" and s3["last_error_at"]
    assert s3["dead"] == 2 and s3["target"].startswith("s3://acme-telemetry/raw/")
    # Not run yet: ok, nothing waiting.
    assert (postgres["state"], postgres["outbox_depth"], postgres["oldest_at"]) == ("ok", 0, None)
    assert postgres["target"] == "postgres db.example.com:5432/telemetry table readings"
    assert bridge["delivered"] == 40 and bridge["target"].startswith("mqtts://broker.example.com")
    assert not any(secret in response.content.decode() for secret in SECRETS)
    assert "writer" not in postgres["target"]  # not even the dsn's user


def test_the_outbox_columns_the_job_leaves_out_have_defaults(acme):  # noqa: F811
    tenant, api = acme
    rule_id = make_rule(api)["id"]
    queue(tenant, rule_id, 1)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT attempts, last_error, next_attempt_at <= clock_timestamp(), created_at IS NOT NULL "
            f"FROM {tables.SINK_OUTBOX}"
        )
        assert cursor.fetchone() == (0, "", True, True)
    # A rule deleted takes its outbox and states with it.
    set_state(tenant, rule_id, 1, "ok")
    assert api.delete("/api/v1/rules/hot").status_code == 204
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT count(*) FROM {tables.SINK_OUTBOX}), "
            f"(SELECT count(*) FROM {tables.SINK_STATE})"
        )
        assert cursor.fetchone() == (0, 0)


def test_the_quota_object_has_the_outbox_keys(acme):  # noqa: F811
    _, api = acme
    limits = api.get("/api/v1/quota").json()["limits"]
    assert limits["max_sink_outbox_messages"] == 10_000
    assert limits["max_sink_outbox_bytes"] == 10_485_760


# -- the connection test -------------------------------------------------------------------------


@pytest.fixture
def fake_writers(monkeypatch):
    """`common.sinks` as a stand-in that records what it was asked (the real one is tested
    against moto below)."""
    calls = []

    def check_action(action, tenant):
        calls.append((action, tenant))
        return (
            None
            if action.get("bucket", "acme-telemetry") == "acme-telemetry"
            else ("S3: no such bucket")
        )

    monkeypatch.setitem(sys.modules, "common.sinks", SimpleNamespace(check_action=check_action))
    return calls


def test_the_test_runs_the_writers_check_on_the_stored_action(acme, fake_writers):  # noqa: F811
    _, api = acme
    make_rule(api)
    response = api.post("/api/v1/rules/hot/actions/2/test")
    assert response.status_code == 200 and response.json() == {"ok": True}
    [(action, tenant)] = fake_writers
    assert tenant == "acme" and action["secret_access_key"] == AWS_SECRET  # opened for it


def test_a_failing_test_answers_in_words(acme, fake_writers):  # noqa: F811
    _, api = acme
    make_rule(api, actions=[{**S3, "bucket": "gone-bucket"}])
    response = api.post("/api/v1/rules/hot/actions/1/test")
    assert response.json() == {"ok": False, "error": "S3: no such bucket"}


@pytest.mark.parametrize("number", [0, 1, 5, 99])
def test_only_a_sink_of_the_rule_is_tested(acme, fake_writers, number):  # noqa: F811
    _, api = acme
    make_rule(api)
    assert api.post(f"/api/v1/rules/hot/actions/{number}/test").status_code == 404
    assert fake_writers == []


@override_settings(SINK_TEST_RATE="2/min")
def test_tests_are_throttled_per_tenant(acme, attacker, fake_writers):  # noqa: F811
    _, api = acme
    make_rule(api)
    for _ in range(2):
        assert api.post("/api/v1/rules/hot/actions/2/test").status_code == 200
    throttled = api.post("/api/v1/rules/hot/actions/2/test")
    assert throttled.status_code == 429 and "Retry-After" in throttled
    _, evil = attacker  # another tenant's budget is its own
    make_rule(evil)
    assert evil.post("/api/v1/rules/hot/actions/2/test").status_code == 200


def test_the_connection_test_reaches_moto_s3(acme, s3_endpoint, monkeypatch):  # noqa: F811
    import boto3

    monkeypatch.setenv("WEBHOOK_ALLOW", "127.0.0.1")
    boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1").create_bucket(
        Bucket="acme-sink-test"
    )
    _, api = acme
    moto = {"endpoint_url": s3_endpoint, "access_key_id": "bench", "secret_access_key": "bench"}
    make_rule(
        api,
        actions=[
            {"type": "s3", "bucket": "acme-sink-test", **moto},
            {"type": "s3", "bucket": "no-such-bucket-here", **moto},
        ],
    )
    assert api.post("/api/v1/rules/hot/actions/1/test").json() == {"ok": True}
    failed = api.post("/api/v1/rules/hot/actions/2/test").json()
    assert failed["ok"] is False and "bucket" in failed["error"].lower()
    assert "bench" not in failed["error"]  # no credential in the words


# -- from the attacker's side ------------------------------------------------------------------


def test_another_tenant_never_sees_nor_tests_a_sink(acme, attacker, fake_writers):  # noqa: F811
    tenant, api = acme
    rule_id = make_rule(api)["id"]
    queue(tenant, rule_id, 1, n=2)
    set_state(tenant, rule_id, 1, "failing", error="S3: access denied")
    _, evil = attacker
    assert evil.get("/api/v1/sinks").json()["count"] == 0
    for path in ("/api/v1/rules/hot/actions/2/test", f"/api/v1/rules/{rule_id}/actions/2/test"):
        assert evil.post(path).status_code == 404
    assert fake_writers == []
    # Its own rule of the same name is its own: its sinks only, none of acme's outbox.
    make_rule(evil, actions=[{"type": "kinesis", "stream": "evil"}])
    [row] = evil.get("/api/v1/sinks").json()["results"]
    assert (row["type"], row["outbox_depth"], row["state"]) == ("kinesis", 0, "ok")
    assert evil.post("/api/v1/rules/hot/actions/1/test").status_code == 200
    [(action, slug)] = fake_writers
    assert (action["stream"], slug) == ("evil", "evil")


def test_a_viewer_sees_sinks_but_no_secret_and_cannot_test(acme, fake_writers):  # noqa: F811
    tenant, api = acme
    make_rule(api, actions=[S3, {"type": "http_batch", "url": "https://in.example.com/b"}])
    viewer = get_user_model().objects.create_user("v@acme.io", "v@acme.io", "pass-w0rd-view")
    Membership.objects.create(user=viewer, tenant=tenant, role="viewer")
    eyes = client_for(login_tokens.login_token(user=viewer, tenant=tenant))
    assert eyes.get("/api/v1/sinks").json()["count"] == 2
    actions = eyes.get("/api/v1/rules/hot").json()["actions"]
    assert actions[1]["secret"] == REDACTED and actions[0]["secret_access_key"] == REDACTED
    assert api.get("/api/v1/rules/hot").json()["actions"][1]["secret"] != REDACTED  # it signs
    assert eyes.post("/api/v1/rules/hot/actions/1/test").status_code == 403
    assert fake_writers == []

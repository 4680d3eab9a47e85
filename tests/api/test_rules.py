"""The rules API as its users drive it: save-time validation (SQL with its position, actions), the
dry run, metrics and dead letters as the rule jobs write them, and another tenant's rules."""

import json
import time

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tenants.accounts import services as account_services
from tenants.models import Membership, Rule, RuleDeadLetter
from tests.api.conftest import client_for

pytestmark = pytest.mark.django_db

SQL = 'SELECT payload.temp AS t, clientid FROM "sensors/+/temp" WHERE payload.temp > 30'


def create(api, name="hot", sql=SQL, actions=None, **extra):
    body = {"name": name, "sql": sql, "actions": actions or [], **extra}
    return api.post("/api/v1/rules", body, format="json")


# -- SQL validation at save time ------------------------------------------------------------


@pytest.mark.parametrize(
    "sql, line, column",
    [
        ('SELECT * FORM "a/b"', 1, 10),
        ('SELECT payload.x\nFROM "a/b"\nWHERE (payload.x > 1', 3, None),
        ('SELECT *\n  FROM "a/b"\n  WHERE x = = 1', 3, None),
    ],
)
def test_sql_error_names_problem_and_position(acme, sql, line, column):
    _, api = acme
    response = create(api, sql=sql)
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert set(error["fields"]) == {"sql"}
    assert error["line"] == line
    if column is not None:
        assert error["column"] == column
    assert isinstance(error["column"], int) and error["column"] >= 1
    assert f"line {line}" in error["message"] and "column" in error["message"]
    assert not Rule.objects.exists()


@pytest.mark.parametrize(
    "sql",
    [
        'SELECT * FROM "a/#/b"',  # not a topic filter
        'SELECT * FROM "a" UNION SELECT * FROM "b"',
        "SELECT * FROM messages",  # a table, not a quoted filter
        'SELECT * FROM "a" WHERE x = \'open',
        'DELETE FROM "a"',
        'SELECT spark_partition_id() FROM "a"',  # a Spark function outside the dialect
        'SELECT * FROM "a" WHERE topic IN (SELECT topic FROM "b")',
        "",
    ],
)
def test_sql_outside_the_dialect_is_a_400_on_sql(acme, sql):
    _, api = acme
    response = create(api, sql=sql)
    assert response.status_code == 400, response.content
    assert "sql" in response.json()["error"]["fields"]


def test_update_validates_sql_too(acme):
    _, api = acme
    assert create(api).status_code == 201
    bad = api.patch("/api/v1/rules/hot", {"sql": 'SELECT * FORM "x"'}, format="json")
    assert bad.status_code == 400 and bad.json()["error"]["line"] == 1
    assert Rule.objects.get(name="hot").sql == SQL


# -- actions --------------------------------------------------------------------------------


def test_each_action_type_is_stored_and_several_per_rule(acme):
    _, api = acme
    actions = [
        {
            "type": "republish",
            "topic": "alerts/${clientid}/hot",
            "payload": "${t}",
            "qos": 1,
            "retain": True,
        },
        {"type": "republish", "topic": "alerts/${ pub_props.'User-Property' }/${payload.a[1]}"},
        {"type": "webhook", "url": "https://hooks.example.com/in?x=1", "secret": "s" * 32},
        {"type": "dataset", "name": "hot-readings"},
    ]
    response = create(api, actions=actions)
    assert response.status_code == 201, response.content
    assert response.json()["actions"] == actions
    assert Rule.objects.get(name="hot").actions == actions


def test_webhook_without_secret_gets_a_strong_one_kept_across_updates(acme):
    _, api = acme
    hook = {"type": "webhook", "url": "https://hooks.example.com/hook"}
    created = create(api, actions=[hook])
    assert created.status_code == 201, created.content
    secret = created.json()["actions"][0]["secret"]
    assert len(secret) >= 22  # token_urlsafe(32): 256 random bits, 43 characters
    assert Rule.objects.get(name="hot").actions[0]["secret"] == secret  # the jobs sign with it
    other = create(api, name="other", actions=[hook]).json()["actions"][0]["secret"]
    assert other != secret
    # Re-sending the same webhook without its secret keeps it; the GET shows it.
    api.patch("/api/v1/rules/hot", {"actions": [hook]}, format="json")
    assert api.get("/api/v1/rules/hot").json()["actions"][0]["secret"] == secret
    # A different URL is a different receiver: a new secret.
    moved = api.patch(
        "/api/v1/rules/hot", {"actions": [dict(hook, url="https://x.example/h")]}, format="json"
    )
    assert moved.json()["actions"][0]["secret"] not in (secret, other)


@pytest.mark.parametrize(
    "action, problem",
    [
        ({"type": "email", "to": "a@b.c"}, "unknown type 'email'"),
        ({"topic": "a/b"}, "unknown type None"),
        ({"type": "republish"}, "needs topic"),
        ({"type": "republish", "topic": "a/+/b"}, "wildcards"),
        ({"type": "republish", "topic": "a/#"}, "wildcards"),
        ({"type": "republish", "topic": "$SYS/x"}, "'$'"),
        ({"type": "republish", "topic": ""}, "non-empty"),
        ({"type": "republish", "topic": "a/${clientid"}, "never closed"),
        ({"type": "republish", "topic": "a/${}"}, "placeholder"),
        ({"type": "republish", "topic": "a", "qos": 3}, "qos"),
        ({"type": "republish", "topic": "a", "qos": "1"}, "qos"),
        ({"type": "republish", "topic": "a", "colour": "red"}, "unknown field(s) colour"),
        ({"type": "republish", "topic": "a", "retain": "yes"}, "retain"),
        ({"type": "republish", "topic": "a", "payload": {"x": 1}}, "payload"),
        ({"type": "webhook", "url": "ftp://example.com/x"}, "http"),
        ({"type": "webhook", "url": "https://"}, "host"),
        ({"type": "webhook", "url": "https://u:p@example.com/"}, "credentials"),
        ({"type": "webhook", "url": "https://e.com", "secret": "short"}, "secret"),
        ({"type": "webhook", "url": "https://e.com", "method": "GET"}, "unknown field(s) method"),
        ({"type": "dataset", "name": "Bad Name"}, "slug"),
        ({"type": "dataset", "name": "../other-tenant"}, "slug"),
        ({"type": "dataset"}, "needs name"),
    ],
)
def test_bad_actions_name_the_action_and_problem(acme, action, problem):
    _, api = acme
    good = {"type": "dataset", "name": "ok"}
    response = create(api, actions=[good, action])
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert list(error["fields"]) == ["actions"]
    assert error["message"].startswith("actions: Action 2:"), error["message"]
    assert problem in error["message"]
    assert not Rule.objects.exists()


def test_unknown_rule_fields_and_reserved_name(acme):
    _, api = acme
    unknown = create(api, colour="red")
    assert unknown.status_code == 400 and "colour" in unknown.json()["error"]["fields"]
    reserved = create(api, name="test")
    assert reserved.status_code == 400 and "name" in reserved.json()["error"]["fields"]


# -- metrics and dead letters ---------------------------------------------------------------


def test_metrics_are_zero_until_the_jobs_write_them(acme):
    _, api = acme
    body = create(api).json()
    assert body["metrics"] == {
        "matched": 0,
        "passed": 0,
        "failed": 0,
        "actions_ok": 0,
        "actions_failed": 0,
        "last_error": "",
        "last_error_at": None,
        "lag_ms": None,
        "latency_p50_ms": None,
        "latency_p99_ms": None,
        "updated_at": None,
    }
    assert body["dead_letters"] == 0


def test_metrics_and_dead_letters_written_by_the_jobs_show_in_the_api(acme, attacker):
    tenant, api = acme
    create(api)
    create(api, name="quiet")
    rule = Rule.objects.get(tenant=tenant, name="hot")
    # As the Spark jobs write them: plain SQL into the tables, no Django models.
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tenants_rulemetrics (rule_id, matched, passed, failed, actions_ok, "
            "actions_failed, last_error, last_error_at, lag_ms, updated_at) "
            "VALUES (%s, 120, 40, 3, 37, 3, 'webhook: HTTP 500', now(), 850, now())",
            [rule.id],
        )
        for attempt in range(3):
            cursor.execute(
                "INSERT INTO tenants_ruledeadletter (rule_id, action, output, error, attempts, "
                "created_at) VALUES (%s, %s, %s, %s, 5, now() - %s * interval '1 minute')",
                [
                    rule.id,
                    '{"type": "webhook", "url": "https://e.com/h"}',
                    f'{{"t": {31 + attempt}}}',
                    "HTTP 500",
                    attempt,
                ],
            )
    detail = api.get("/api/v1/rules/hot").json()
    metrics = detail["metrics"]
    assert (metrics["matched"], metrics["passed"], metrics["failed"]) == (120, 40, 3)
    assert (metrics["actions_ok"], metrics["actions_failed"]) == (37, 3)
    assert metrics["last_error"] == "webhook: HTTP 500" and metrics["last_error_at"]
    assert metrics["lag_ms"] == 850
    assert detail["dead_letters"] == 3
    listed = {r["name"]: r for r in api.get("/api/v1/rules").json()["results"]}
    assert listed["hot"]["metrics"]["matched"] == 120 and listed["hot"]["dead_letters"] == 3
    assert listed["quiet"]["metrics"]["matched"] == 0 and listed["quiet"]["dead_letters"] == 0

    page = api.get("/api/v1/rules/hot/dead-letters?limit=2").json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["next"]
    newest = page["results"][0]
    assert newest["output"] == {"t": 31} and newest["error"] == "HTTP 500"
    assert newest["attempts"] == 5 and newest["action"]["type"] == "webhook"

    # The attacker sees none of it and clears nothing.
    _, evil = attacker
    assert evil.get("/api/v1/rules/hot/dead-letters").status_code == 404
    assert evil.delete("/api/v1/rules/hot/dead-letters").status_code == 404
    assert RuleDeadLetter.objects.filter(rule=rule).count() == 3

    assert api.delete("/api/v1/rules/hot/dead-letters").status_code == 204
    assert api.get("/api/v1/rules/hot").json()["dead_letters"] == 0
    assert api.get("/api/v1/rules/hot").json()["metrics"]["matched"] == 120


# -- another tenant -------------------------------------------------------------------------


def test_another_tenants_rule_is_a_404_from_the_attackers_side(acme, attacker):
    _, api = acme
    assert create(api, actions=[{"type": "webhook", "url": "https://e.com/h"}]).status_code == 201
    _, evil = attacker
    for response in (
        evil.get("/api/v1/rules/hot"),
        evil.patch("/api/v1/rules/hot", {"enabled": False}, format="json"),
        evil.delete("/api/v1/rules/hot"),
        evil.get("/api/v1/rules/hot/dead-letters"),
    ):
        assert response.status_code == 404, response.content
    assert evil.get("/api/v1/rules").json()["count"] == 0
    assert evil.get("/api/v1/rules?name=hot").json()["count"] == 0
    # Same name in the attacker's tenant is its own rule; acme's is untouched.
    assert create(evil).status_code == 201
    assert evil.delete("/api/v1/rules/hot").status_code == 204
    assert Rule.objects.get(name="hot").enabled is True


# -- dry run --------------------------------------------------------------------------------


def dry(api, sql, **context):
    return api.post("/api/v1/rules/test", {"sql": sql, "context": context}, format="json")


def test_dry_run_select_match(acme):
    _, api = acme
    response = dry(
        api,
        "SELECT payload.temp AS t, topic(2) AS room, clientid, username, qos "
        'FROM "sensors/+/temp" WHERE payload.temp > 30',
        topic="sensors/kitchen/temp",
        payload='{"temp": 31.5}',
        qos=1,
        clientid="dev-1",
        username="acme/dev-1",
    )
    assert response.status_code == 200, response.content
    assert response.json() == {
        "match": True,
        "outputs": [
            {"t": 31.5, "room": "kitchen", "clientid": "dev-1", "username": "acme/dev-1", "qos": 1}
        ],
    }


def test_dry_run_no_match_on_where_and_on_from(acme):
    _, api = acme
    cold = dry(api, SQL, topic="sensors/a/temp", payload='{"temp": 12}')
    assert cold.status_code == 200 and cold.json() == {"match": False}
    elsewhere = dry(api, SQL, topic="other/a/temp", payload='{"temp": 99}')
    assert elsewhere.status_code == 200 and elsewhere.json() == {"match": False}


def test_dry_run_foreach_gives_one_output_per_element(acme):
    _, api = acme
    sql = 'FOREACH payload.sensors AS s DO s.name AS name, s.v AS v INCASE s.v > 1 FROM "t/#"'
    payload = '{"sensors": [{"name": "a", "v": 1}, {"name": "b", "v": 2}, {"name": "c", "v": 3}]}'
    response = dry(api, sql, topic="t/1", payload=payload)
    assert response.status_code == 200, response.content
    assert response.json() == {
        "match": True,
        "outputs": [{"name": "b", "v": 2}, {"name": "c", "v": 3}],
    }


def test_dry_run_user_properties_and_object_payload(acme):
    _, api = acme
    response = dry(
        api,
        'SELECT user_properties.unit AS unit, payload.x AS x FROM "t/#"',
        topic="t/1",
        payload={"x": [1, 2]},
        user_properties={"unit": "C"},
    )
    assert response.status_code == 200, response.content
    assert response.json() == {"match": True, "outputs": [{"unit": "C", "x": [1, 2]}]}


def test_dry_run_fills_missing_context_with_examples(acme):
    _, api = acme
    response = api.post(
        "/api/v1/rules/test",
        {"sql": 'SELECT topic, payload.msg AS msg, clientid FROM "#"'},
        format="json",
    )
    assert response.status_code == 200, response.content
    output = response.json()["outputs"][0]
    assert output == {"topic": "t/a", "msg": "hello", "clientid": "c_emqx"}


def test_dry_run_syntax_error_has_position(acme):
    _, api = acme
    response = dry(api, 'SELECT *\nFORM "t/#"', topic="t/1")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["line"] == 2 and error["column"] == 1
    assert "sql" in error["fields"] and "line 2" in error["message"]


def test_dry_run_runtime_error_is_a_400_naming_it(acme):
    _, api = acme
    response = dry(api, 'SELECT json_decode(payload) AS x FROM "t/#"', topic="t/1", payload="{bad")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert "json_decode" in error["message"] and "context" in error["fields"]


def test_dry_run_lifecycle_event(acme):
    _, api = acme
    response = dry(
        api,
        'SELECT clientid, reason FROM "$events/client_disconnected"',
        event="client.disconnected",
        clientid="dev-1",
        reason="keepalive_timeout",
    )
    assert response.status_code == 200, response.content
    assert response.json() == {
        "match": True,
        "outputs": [{"clientid": "dev-1", "reason": "keepalive_timeout"}],
    }
    publish = dry(api, 'SELECT clientid FROM "$events/client_disconnected"', topic="t/1")
    assert publish.json() == {"match": False}


def test_dry_run_takes_emqx5_event_names_the_context_peerhost_and_unknown_events(acme):
    _, api = acme
    response = dry(
        api,
        'SELECT clientid, clientip() AS ip, peerhost FROM "$events/client/connected"',
        event="client.connected",
        clientid="dev-1",
        peerhost="10.9.8.7",
    )
    assert response.status_code == 200, response.content
    assert response.json() == {
        "match": True,
        "outputs": [{"clientid": "dev-1", "ip": "10.9.8.7", "peerhost": "10.9.8.7"}],
    }
    # An EMQX event the archive has no rows for: saved, and it takes nothing
    sql = 'SELECT clientid FROM "$events/message_dropped"'
    assert create(api, name="drops", sql=sql).status_code == 201
    assert dry(api, sql, event="client.connected").json() == {"match": False}
    assert dry(api, sql, topic="t/1").json() == {"match": False}


def test_dry_run_bad_context_is_a_400(acme):
    _, api = acme
    for context in ({"qos": 3}, {"colour": "red"}, {"user_properties": "x"}):
        response = api.post(
            "/api/v1/rules/test", {"sql": 'SELECT * FROM "#"', "context": context}, format="json"
        )
        assert response.status_code == 400, (context, response.content)


def _viewer(tenant):
    user = get_user_model().objects.create_user(
        "viewer@acme.io", "viewer@acme.io", "pass-w0rd-view"
    )
    Membership.objects.create(user=user, tenant=tenant, role="viewer")
    return client_for(account_services.api_token_create(user=user, tenant=tenant)[1])


def test_webhook_secrets_are_hidden_from_viewers_and_dead_letters(acme):
    tenant, api = acme
    hook = {"type": "webhook", "url": "https://e.com/h", "secret": "k" * 32}
    create(api, actions=[hook, {"type": "dataset", "name": "d"}])
    viewer = _viewer(tenant)
    for body in (
        viewer.get("/api/v1/rules/hot").json(),
        viewer.get("/api/v1/rules").json()["results"][0],
    ):
        assert body["actions"] == [dict(hook, secret="********"), {"type": "dataset", "name": "d"}]
    assert api.get("/api/v1/rules/hot").json()["actions"][0]["secret"] == "k" * 32
    RuleDeadLetter.objects.create(
        rule=Rule.objects.get(name="hot"), action=hook, output={"t": 1}, error="HTTP 500"
    )
    letter = api.get("/api/v1/rules/hot/dead-letters").json()["results"][0]
    assert letter["action"]["secret"] == "********"
    assert "k" * 32 not in str(api.get("/api/v1/rules/hot/dead-letters").content)


def test_dry_run_is_fast_and_open_to_viewers_but_needs_a_token(acme):
    tenant, _ = acme
    viewer = _viewer(tenant)
    sql = 'SELECT payload.a.b AS ab FROM "x/#" WHERE payload.a.b = 2'
    dry(viewer, sql, topic="x/1", payload='{"a": {"b": 2}}')  # warm
    started = time.perf_counter()
    response = dry(viewer, sql, topic="x/1", payload='{"a": {"b": 2}}')
    elapsed = time.perf_counter() - started
    assert response.status_code == 200 and response.json()["outputs"] == [{"ab": 2}]
    assert elapsed < 2.0, elapsed
    # A viewer may test but not save; nobody tests without a token.
    assert create(viewer).status_code == 403
    anonymous = client_for().post("/api/v1/rules/test", {"sql": sql}, format="json")
    assert anonymous.status_code in (401, 403)


def test_openapi_documents_the_dry_run_with_examples(client):
    document = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    operation = document["paths"]["/api/v1/rules/test"]["post"]
    examples = operation["requestBody"]["content"]["application/json"]["examples"]
    assert any("FOREACH" in e["value"]["sql"] for e in examples.values())
    assert "examples" in operation["responses"]["200"]["content"]["application/json"]
    assert "/api/v1/rules/{name}/dead-letters" in document["paths"]


def test_the_documented_examples_work(acme, client):
    _, api = acme
    document = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    test_examples = document["paths"]["/api/v1/rules/test"]["post"]["requestBody"]["content"]
    for sample in test_examples["application/json"]["examples"].values():
        response = api.post("/api/v1/rules/test", sample["value"], format="json")
        assert response.status_code == 200 and response.json()["match"], sample
    create_examples = document["paths"]["/api/v1/rules"]["post"]["requestBody"]["content"]
    for sample in create_examples["application/json"]["examples"].values():
        assert api.post("/api/v1/rules", sample["value"], format="json").status_code == 201


# Fragments of the dialect (and of what it refuses), shuffled into statements the fuzzer sends.
TOKENS = [
    "SELECT",
    "FOREACH",
    "DO",
    "INCASE",
    "FROM",
    "WHERE",
    "AS",
    "AND",
    "OR",
    "NOT",
    "CASE",
    "WHEN",
    "THEN",
    "ELSE",
    "END",
    "IN",
    "*",
    ",",
    "(",
    ")",
    "[",
    "]",
    "..",
    ".",
    "=",
    "!=",
    "<>",
    "<",
    ">=",
    "=~",
    "+",
    "-",
    "/",
    "div",
    "mod",
    "payload",
    "payload.a",
    "payload.a[1]",
    "x[-1]",
    "topic",
    "topic(2)",
    "clientid",
    "qos",
    "'s'",
    "'2'",
    "2",
    "-1.5",
    '"t/#"',
    '"a/+/b"',
    '"$events/client_connected"',
    "nth(1, payload.l)",
    "split(topic, '/')",
    "json_decode(payload)",
    "sprintf('~p', 1)",
    "regex_match(topic, '(a+)+$')",
    "UNION",
    "JOIN",
    "`x`",
    "--",
    "\n",
]


@given(
    sql=st.one_of(
        st.lists(st.sampled_from(TOKENS), min_size=1, max_size=14).map(" ".join),
        st.text(max_size=80),
    ),
    payload=st.one_of(
        st.text(max_size=40),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=5),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.sampled_from(["a", "l", "x"]), inner, max_size=3)
            ),
            max_leaves=6,
        ).map(json.dumps),
    ),
    topic=st.sampled_from(["t/1", "a/x/b", "sensors/k/temp", "a/b"]),
)
@example(sql="\x00", payload="", topic="t/1")  # found by CI: the parser's 400, not the field's
@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_dry_run_never_fails_with_a_server_error(acme, sql, payload, topic):
    """Whatever the SQL and message, the dry run answers 200 or a 400 in the API's error shape."""
    _, api = acme
    response = dry(api, sql, topic=topic, payload=payload)
    assert response.status_code in (200, 400), (sql, payload, response.content)
    body = response.json()
    if response.status_code == 200:
        assert body["match"] in (True, False)
        assert body["match"] is False or isinstance(body["outputs"], list)
    else:
        # "invalid" names a bad field; "parse_error" a body the JSON parser refuses (NUL characters).
        assert body["error"]["code"] in ("invalid", "parse_error") and body["error"]["message"]


def test_a_rule_paused_for_its_budget_says_so_and_resumes_when_enabled(acme, client):
    """The live job pauses a rule that keeps going over its budget (issue 29): the tenant reads
    when and why in the API and the portal, and enabling it again resumes it."""
    from django.utils import timezone

    tenant, api = acme
    create(api)
    reason = "paused 2026-01-01 00:00:00 UTC: 10 of 10 messages went over the rule's budget"
    Rule.objects.filter(name="hot").update(paused_at=timezone.now(), paused_reason=reason)
    body = api.get("/api/v1/rules/hot").json()
    assert body["paused"]["reason"] == reason and body["paused"]["at"]
    client.login(username="owner@acme.io", password="pass-w0rd-acme")
    assert "is paused: paused 2026-01-01" in client.get("/rules/").content.decode()
    assert api.patch("/api/v1/rules/hot", {"enabled": True}, format="json").json()["paused"] is None
    assert Rule.objects.get(name="hot").paused_reason == ""

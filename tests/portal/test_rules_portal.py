"""The portal's Rules pages through Django's test client against real Postgres: the list with the
jobs' metrics, the editor's save-time errors with their position, dead letters, other tenants."""

import json

import pytest
from django.contrib.auth import get_user_model
from django.db import connection

from tenants.accounts import services as account_services
from tenants.models import Membership, Rule, RuleDeadLetter
from tenants.rules import services as rule_services

pytestmark = pytest.mark.django_db

SQL = 'SELECT payload.temp AS t FROM "sensors/+/temp" WHERE payload.temp > 30'


@pytest.fixture
def owner(client):
    tenant, user, _ = account_services.signup(
        tenant="acme", email="me@acme.io", password="a long passphrase"
    )
    client.force_login(user)
    return tenant


def _write_metrics(rule, matched=120, failed=3, error="webhook: HTTP 500"):
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tenants_rulemetrics (rule_id, matched, passed, failed, actions_ok, "
            "actions_failed, last_error, last_error_at, lag_ms, updated_at) "
            "VALUES (%s, %s, 40, %s, 37, 3, %s, now(), 850, now())",
            [rule.id, matched, failed, error],
        )
        cursor.execute(
            "INSERT INTO tenants_ruledeadletter (rule_id, action, output, error, attempts, "
            "created_at) VALUES (%s, %s, %s, 'HTTP 503 from receiver', 5, now())",
            [rule.id, '{"type": "webhook", "url": "https://hooks.example/in"}', '{"t": 33}'],
        )


def test_rules_list_shows_enabled_state_and_metrics(client, owner):
    rule = rule_services.rule_create(tenant=owner, name="hot", sql=SQL)
    rule_services.rule_create(tenant=owner, name="idle", sql=SQL, enabled=False)
    _write_metrics(rule)
    page = client.get("/rules/").content.decode()
    assert 'href="/rules/hot/"' in page and 'href="/rules/idle/"' in page
    def row(name: str) -> str:  # the rule's table row, whichever order the list has
        start = page.index(f'data-rule="{name}"')
        return page[start : page.index("</tr>", start)]

    for value in (">yes<", ">120<", ">40<", ">3<", ">37<", "webhook: HTTP 500", "850 ms"):
        assert value in row("hot"), value
    assert ">no<" in row("idle") and 'data-metric="matched">0<' in row("idle")


def test_create_rule_through_the_editor(client, owner):
    actions = [{"type": "webhook", "url": "https://hooks.example/in"}]
    response = client.post(
        "/rules/new/",
        {"name": "hot", "sql": SQL, "actions": json.dumps(actions), "enabled": "on"},
    )
    assert response.status_code == 302 and response["Location"] == "/rules/hot/"
    rule = Rule.objects.get(tenant=owner, name="hot")
    assert rule.sql == SQL and rule.enabled
    secret = rule.actions[0]["secret"]
    page = client.get("/rules/hot/").content.decode()
    assert secret in page  # the generated signing secret is shown with the actions
    assert "Try it on a sample message" in page and 'data-url="/api/v1/rules/test"' in page


def test_sql_error_is_shown_with_its_position(client, owner):
    response = client.post(
        "/rules/new/", {"name": "bad", "sql": 'SELECT *\nFORM "t/#"', "actions": "[]"}
    )
    assert response.status_code == 200
    page = response.content.decode()
    assert "line 2" in page and "column" in page
    assert 'data-line="2"' in page and 'data-column="1"' in page
    assert not Rule.objects.exists()


def test_actions_errors_are_shown(client, owner):
    bad_json = client.post("/rules/new/", {"name": "r", "sql": SQL, "actions": "[{"}).content
    assert b"Not valid JSON" in bad_json
    bad_action = client.post(
        "/rules/new/",
        {"name": "r", "sql": SQL, "actions": '[{"type": "republish", "topic": "a/#"}]'},
    ).content.decode()
    assert "Action 1" in bad_action and "wildcards" in bad_action
    assert not Rule.objects.exists()


def test_edit_keeps_the_name_and_updates(client, owner):
    rule_services.rule_create(tenant=owner, name="hot", sql=SQL)
    response = client.post(
        "/rules/hot/",
        {"name": "renamed", "sql": 'SELECT * FROM "a/#"', "actions": "[]"},  # enabled unticked
    )
    assert response.status_code == 302
    rule = Rule.objects.get(tenant=owner)
    assert (rule.name, rule.sql, rule.enabled) == ("hot", 'SELECT * FROM "a/#"', False)


def test_dead_letters_visible_and_cleared(client, owner):
    rule = rule_services.rule_create(tenant=owner, name="hot", sql=SQL)
    _write_metrics(rule)
    page = client.get("/rules/hot/").content.decode()
    assert "Dead letters (1)" in page and "HTTP 503 from receiver" in page
    assert "https://hooks.example/in" in page
    client.post("/rules/hot/dead-letters/clear/")
    assert not RuleDeadLetter.objects.exists()
    assert "Dead letters (0)" in client.get("/rules/hot/").content.decode()


def test_another_tenants_rule_is_a_404(client, owner):
    evil, _, _ = account_services.signup(
        tenant="evil", email="me@evil.io", password="a long passphrase"
    )
    rule_services.rule_create(tenant=evil, name="secret-rule", sql=SQL)
    assert "secret-rule" not in client.get("/rules/").content.decode()
    assert client.get("/rules/secret-rule/").status_code == 404
    assert client.post("/rules/secret-rule/delete/").status_code == 404
    assert client.post("/rules/secret-rule/dead-letters/clear/").status_code == 404
    assert client.post("/rules/secret-rule/", {"sql": SQL, "actions": "[]"}).status_code == 404
    assert Rule.objects.filter(tenant=evil).count() == 1


def test_viewer_sees_but_cannot_change(client, owner):
    hook = {"type": "webhook", "url": "https://e.com/h", "secret": "k" * 32}
    rule_services.rule_create(tenant=owner, name="hot", sql=SQL, actions=[hook])
    viewer = get_user_model().objects.create_user("v@acme.io", "v@acme.io", "a long passphrase")
    Membership.objects.create(user=viewer, tenant=owner, role="viewer")
    client.force_login(viewer)
    assert client.get("/rules/hot/").status_code == 200
    page = client.get("/rules/hot/").content.decode()
    assert "Save rule" not in page and "https://e.com/h" in page
    assert "k" * 32 not in page  # the webhook's signing secret is not for viewers
    assert client.post("/rules/hot/", {"sql": SQL, "actions": "[]"}).status_code == 403
    assert client.post("/rules/hot/delete/").status_code == 403
    assert Rule.objects.filter(name="hot").exists()


def test_run_over_history_offers_one_action_of_a_rule_with_several(client, owner):
    two = [
        {"type": "dataset", "name": "hot"},
        {"type": "http_batch", "url": "https://in.example/b"},
    ]
    rule_services.rule_create(tenant=owner, name="hot", sql=SQL, actions=two)
    rule_services.rule_create(tenant=owner, name="one", sql=SQL, actions=two[:1])
    page = client.get("/rules/hot/").content.decode()
    choice = page[
        page.index('id="history-action"') : page.index(
            "</select>", page.index('id="history-action"')
        )
    ]
    assert '<option value="" selected>every action' in choice
    assert 'value="1">only action 1: dataset<' in choice
    assert 'value="2">only action 2: http_batch<' in choice
    assert 'id="history-action"' not in client.get("/rules/one/").content.decode()

"""The Sinks page and the rule editor's sinks through Django's test client (issue 47): each sink
with its state, outbox and last error, linked from the navigation beside Rules; a Test connection
button that answers in words; the editor shows no credential and keeps them when the rule is
saved back as shown. Another tenant's sink is a 404 and never listed; a viewer reads but has no
button."""

import html as html_text
import json
import re
import sys
from types import SimpleNamespace

import pytest
from django.contrib.auth import get_user_model

from tenants.accounts import services as account_services
from tenants.models import Membership, Rule
from tenants.rules import services as rule_services
from tests.control_plane.test_sinks_api import (
    BRIDGE,
    REPUBLISH,
    S3,
    SECRETS,
    SQL,
    queue,
    set_state,
)

pytestmark = pytest.mark.django_db
PASSWORD = "a long passphrase"


@pytest.fixture(autouse=True)
def _sealing_key(monkeypatch):
    monkeypatch.setenv("SEALING_KEY", "the-platforms-sealing-key-" + "k" * 40)
    monkeypatch.delenv("SEALING_KEY_PREVIOUS", raising=False)


@pytest.fixture
def acme():
    tenant, owner, _ = account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    rule = rule_services.rule_create(
        tenant=tenant, name="hot", sql=SQL, actions=[REPUBLISH, S3, BRIDGE]
    )
    return tenant, owner, rule


@pytest.fixture
def writers(monkeypatch):
    """`common.sinks` as a stand-in: the bridge's far end refuses, the bucket takes writes."""
    calls = []

    def check_action(action, tenant):
        calls.append((action["type"], tenant))
        return (
            "MQTT bridge: the broker refused the username or password"
            if (action["type"] == "mqtt_bridge")
            else None
        )

    monkeypatch.setitem(sys.modules, "common.sinks", SimpleNamespace(check_action=check_action))
    return calls


def _row(page, marker):
    row = page[page.index(marker) :]
    return row[: row.index("</tr>")]


def test_the_sinks_page_lists_each_sink_and_tests_its_connection(client, acme, writers):
    tenant, owner, rule = acme
    queue(tenant, rule.id, 1, n=4)
    set_state(tenant, rule.id, 1, "retrying", error="S3: the bucket refused the key")
    set_state(tenant, rule.id, 2, "ok", delivered=12)
    client.force_login(owner)

    page = client.get("/sinks/").content.decode()
    assert 'href="/sinks/" aria-current="page"' in page
    rules_link, sinks_link = page.index('href="/rules/"'), page.index('href="/sinks/"')
    assert 0 < sinks_link - rules_link < 200  # beside Rules in the navigation
    assert 'data-action="1"' not in page  # the republish is no sink
    s3 = _row(page, 'data-rule="hot" data-action="2"')
    assert 'data-state="retrying"' in s3 and "s3://acme-telemetry/raw/" in s3
    assert '<td class="num depth">4</td>' in s3 and "S3: the bucket refused the key" in s3
    assert 'action="/rules/hot/actions/2/test/"' in s3 and "Test connection" in s3
    bridge = _row(page, 'data-rule="hot" data-action="3"')
    assert "mqtts://broker.example.com:8883" in bridge
    assert re.search(r'class="num delivered" title="[^"]*">12</td>', bridge)
    assert '<td class="num per-minute">0/min</td>' in bridge
    assert not any(secret in page for secret in SECRETS)

    worked = client.post("/rules/hot/actions/2/test/", follow=True).content.decode()
    assert "hot, action 2: the connection works." in worked
    failed = client.post("/rules/hot/actions/3/test/", follow=True).content.decode()
    assert "hot, action 3: the connection failed: MQTT bridge: the broker refused" in failed
    assert writers == [("s3", "acme"), ("mqtt_bridge", "acme")]
    assert client.post("/rules/hot/actions/1/test/").status_code == 404  # the republish


def test_the_rule_editor_hides_credentials_and_keeps_them_when_saved_as_shown(client, acme):
    tenant, owner, rule = acme
    client.force_login(owner)
    page = client.get("/rules/hot/").content.decode()
    textarea = re.search(r'<textarea name="actions"[^>]*>(.*?)</textarea>', page, re.S)
    shown = json.loads(html_text.unescape(textarea.group(1)))
    assert shown[1]["secret_access_key"] == "********" and shown[2]["password"] == "********"
    assert not any(secret in page for secret in SECRETS)
    saved = client.post(
        "/rules/hot/", {"sql": SQL, "actions": json.dumps(shown), "enabled": "on"}, follow=True
    )
    assert "Rule hot saved." in saved.content.decode()
    actions = Rule.objects.get(id=rule.id).actions
    assert actions[1]["secret_access_key"] == S3["secret_access_key"]
    assert actions[2]["password"] == BRIDGE["password"]
    # A new sink written in the editor is checked like any action.
    bad = [*shown, {"type": "s3", "bucket": "No_Such_Name"}]
    refused = client.post("/rules/hot/", {"sql": SQL, "actions": json.dumps(bad)}).content.decode()
    assert "Action 4: bucket must be an S3 bucket name" in html_text.unescape(refused)


def test_another_tenant_never_sees_nor_tests_a_sink(client, acme, writers):
    tenant, _, rule = acme
    queue(tenant, rule.id, 1, n=2)
    _, evil, _ = account_services.signup(tenant="evil", email="me@evil.io", password=PASSWORD)
    client.force_login(evil)
    page = client.get("/sinks/").content.decode()
    assert 'data-rule="hot"' not in page and "No sinks yet" in page
    assert client.post("/rules/hot/actions/2/test/").status_code == 404
    assert writers == []


def test_a_viewer_reads_the_sinks_but_has_no_button(client, acme, writers):
    tenant, _, _ = acme
    viewer = get_user_model().objects.create_user("v@acme.io", "v@acme.io", PASSWORD)
    Membership.objects.create(user=viewer, tenant=tenant, role="viewer")
    client.force_login(viewer)
    page = client.get("/sinks/").content.decode()
    assert 'data-rule="hot" data-action="2"' in page and "Test connection" not in page
    assert client.post("/rules/hot/actions/2/test/").status_code == 403
    assert writers == []

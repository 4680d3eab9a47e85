"""A tenant's webhook must not reach the platform's own network (SSRF), from the attacker's side.

As deployed (`WEBHOOK_ALLOW_PRIVATE=0`, set by infra/terraform) a rule's webhook may call public
addresses only: a URL
whose literal host is loopback, private, link-local (the cloud metadata service) or otherwise
non-public is refused when the rule is saved (400 naming the action and the address), and every
call checks the address it actually connected to, so names that resolve there are refused too.
The receiver here is a real HTTP server on loopback: it stands for an internal service, and
must see no request."""

from __future__ import annotations

import pytest

from common.webhook import post_signed
from tenants.models import Rule
from tests.api.conftest import acme  # noqa: F401 (fixture)
from tests.deploy.test_terraform import TERRAFORM, load, value
from tests.spark.conftest import Receiver

SQL = 'SELECT * FROM "sensors/#"'


@pytest.fixture
def private_refused(monkeypatch):
    monkeypatch.setenv("WEBHOOK_ALLOW_PRIVATE", "0")


@pytest.fixture
def internal():
    server = Receiver()
    yield server
    server.close()


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url, says",
    [
        ("http://169.254.169.254/latest/meta-data/iam/", "link-local"),  # cloud metadata
        ("http://127.0.0.1:8000/admin", "loopback"),
        ("http://localhost:6379/", "this machine"),
        ("http://api.localhost/", "this machine"),
        ("https://10.0.0.5/hook", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://[::1]:5432/", "loopback"),
        ("http://[::ffff:127.0.0.1]/", "loopback"),  # IPv4 dressed as IPv6
        ("http://[fe80::1]/", "link-local"),
        ("http://0.0.0.0:8000/", "unspecified"),
        ("http://100.64.0.1/", "private or reserved"),  # carrier-grade NAT
    ],
)
def test_saving_a_rule_aimed_at_an_internal_address_is_refused(acme, private_refused, url, says):  # noqa: F811
    _, api = acme
    body = {"name": "exfil", "sql": SQL, "actions": [{"type": "webhook", "url": url}]}
    response = api.post("/api/v1/rules", body, format="json")
    assert response.status_code == 400, response.content
    message = response.json()["error"]["message"]
    assert "Action 1" in message and says in message and "WEBHOOK_ALLOW_PRIVATE" in message
    assert not Rule.objects.exists()


@pytest.mark.django_db
def test_a_public_webhook_url_is_saved(acme, private_refused):  # noqa: F811
    _, api = acme
    body = {
        "name": "ok",
        "sql": SQL,
        "actions": [{"type": "webhook", "url": "https://hooks.example.com/mqtt"}],
    }
    assert api.post("/api/v1/rules", body, format="json").status_code == 201


@pytest.mark.parametrize(
    "host",
    [
        "2130706433",  # 127.0.0.1 as one decimal number: no IP literal, the resolver's
        "127.1",  # the short form, likewise
        "0x7f.1",  # and in hex
    ],
)
def test_a_call_reaching_an_internal_address_is_refused_before_a_byte_is_sent(
    internal, private_refused, host
):
    port = internal.server.server_port
    result = post_signed(f"http://{host}:{port}/hook", "s" * 32, {"a": 1}, rule_id=1, attempts=3)
    assert not result.ok and "loopback" in result.error, result
    assert result.attempts == 1  # refused for good, not retried
    assert internal.calls == []


def test_the_embedded_platform_allows_receivers_on_its_own_machine(internal, monkeypatch):
    # Unset (make run: one machine, the user's own), a receiver on loopback is called.
    monkeypatch.delenv("WEBHOOK_ALLOW_PRIVATE", raising=False)
    result = post_signed(internal.url, "s" * 32, {"a": 1}, rule_id=1)
    assert result.ok and len(internal.calls) == 1


def test_the_deployed_platform_refuses_private_destinations():
    platform = TERRAFORM / "modules" / "platform" / "main.tf"
    environment = load(platform)["locals"][0]["environment"]
    assert value(environment["WEBHOOK_ALLOW_PRIVATE"]) == "0"


def test_redirects_are_not_followed(internal, monkeypatch):
    monkeypatch.delenv("WEBHOOK_ALLOW_PRIVATE", raising=False)
    internal.statuses = [302]
    result = post_signed(internal.url, "s" * 32, {"a": 1}, rule_id=1, attempts=3)
    assert not result.ok and "redirects are not followed" in result.error
    assert len(internal.calls) == 1

"""A tenant's webhook must not reach the platform's own network (SSRF), from the attacker's side
(issue 29, point 6).

Every process, the embedded `make run` included, calls public addresses only unless the
operator allow-lists others (`WEBHOOK_ALLOW`): a URL whose literal host is loopback, private,
link-local (the cloud metadata service) or otherwise non-public, in any IPv6 form that carries
such an IPv4 address, is refused when the rule is saved (400 naming the action), and every call
resolves the name once, refuses it if any address is not allowed (before a packet is sent) and
connects to a vetted address, pinned for the request. Errors a tenant reads name no address.
The receiver here is a real HTTP server on loopback: it stands for an internal service, and
must see no request."""

from __future__ import annotations

import socket

import pytest

from common.webhooks.delivery import post_signed
from common.webhooks.destinations import (
    RefusedDestination,
    address_problem,
    destination_problem,
    vet,
)
from tenants.models import Rule
from tests.api.conftest import acme  # noqa: F401 (fixture)
from tests.deploy.test_terraform import TERRAFORM, load, value
from tests.spark.conftest import Receiver

SQL = 'SELECT * FROM "sensors/#"'


@pytest.fixture(autouse=True)
def platform_defaults(monkeypatch):
    """The defaults every process has: nothing allowed beyond public addresses."""
    monkeypatch.delenv("WEBHOOK_ALLOW", raising=False)
    monkeypatch.delenv("WEBHOOK_ALLOW_PRIVATE", raising=False)


@pytest.fixture
def internal():
    server = Receiver()
    yield server
    server.close()


# Every form of a non-public destination, and the kind its refusal names.
REFUSED = [
    ("127.0.0.1", "loopback"),
    ("10.0.0.5", "private"),
    ("192.168.1.1", "private"),
    ("172.16.0.1", "private"),
    ("100.64.0.1", "private or reserved"),  # carrier-grade NAT
    ("169.254.169.254", "link-local"),  # cloud metadata
    ("0.0.0.0", "unspecified"),
    ("224.0.0.1", "multicast"),
    ("255.255.255.255", "private or reserved"),
    ("::1", "loopback"),
    ("fe80::1", "link-local"),
    ("fd00:ec2::254", "private"),  # AWS metadata over IPv6
    ("::ffff:127.0.0.1", "carries 127.0.0.1"),  # IPv4-mapped
    ("::ffff:0:a00:1", "carries 10.0.0.1"),  # IPv4-translated (SIIT)
    ("::127.0.0.1", "carries 127.0.0.1"),  # IPv4-compatible
    ("::a9fe:a9fe", "carries 169.254.169.254"),  # IPv4-compatible, hex
    ("64:ff9b::7f00:1", "carries 127.0.0.1"),  # NAT64
    ("64:ff9b::10.0.0.5", "carries 10.0.0.5"),  # NAT64, dotted
    ("64:ff9b:1::808:808", "NAT64 local-use"),  # RFC 8215: hides any IPv4 address
    ("2002:7f00:1::1", "carries 127.0.0.1"),  # 6to4
    ("2002:a9fe:a9fe::", "carries 169.254.169.254"),  # 6to4 of the metadata service
    ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "Teredo"),
]
PUBLIC = ["93.184.216.34", "2606:4700:4700::1111", "64:ff9b::808:808", "2002:808:808::1"]


@pytest.mark.parametrize("address, says", REFUSED)
def test_the_guard_refuses_every_form_of_a_non_public_address(address, says):
    problem = address_problem(address)
    assert problem is not None and says in problem, problem
    assert destination_problem(address, 80) is not None


@pytest.mark.parametrize("address", PUBLIC)
def test_the_guard_lets_public_addresses_through(address):
    assert address_problem(address) is None


def test_an_operator_allow_list_opens_exactly_what_it_names(monkeypatch):
    monkeypatch.setenv("WEBHOOK_ALLOW", "10.1.2.0/24, 127.0.0.1:9000, [::1]:9000-9099")
    assert vet("hooks.internal", 443, ["10.1.2.7"]) == ["10.1.2.7"]
    assert vet("127.0.0.1", 9000, ["127.0.0.1"]) == ["127.0.0.1"]
    assert vet("x", 9000, ["::ffff:127.0.0.1"]) == ["::ffff:127.0.0.1"]  # the same address
    assert vet("x", 9050, ["::1"]) == ["::1"]
    for address, port in (("10.1.3.7", 443), ("127.0.0.1", 9001), ("::1", 8000)):
        with pytest.raises(RefusedDestination):
            vet("x", port, [address])


def test_a_name_with_one_internal_address_among_public_ones_is_refused_naming_none():
    with pytest.raises(RefusedDestination) as refused:
        vet("rebind.example", 80, ["93.184.216.34", "10.0.0.1"])
    assert "10.0.0.1" not in str(refused.value) and "no public address" in str(refused.value)


@pytest.mark.django_db
@pytest.mark.parametrize("address, says", REFUSED)
def test_saving_a_rule_aimed_at_an_internal_address_is_refused(acme, address, says):  # noqa: F811
    _, api = acme
    host = f"[{address}]" if ":" in address else address
    url = f"http://{host}:8000/api/v1/signup"
    body = {"name": "exfil", "sql": SQL, "actions": [{"type": "webhook", "url": url}]}
    response = api.post("/api/v1/rules", body, format="json")
    assert response.status_code == 400, response.content
    message = response.json()["error"]["message"]
    assert "Action 1" in message and says in message and "WEBHOOK_ALLOW" in message
    assert not Rule.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("url", ["http://localhost:6379/", "http://api.localhost/"])
def test_saving_a_rule_aimed_at_this_machine_by_name_is_refused(acme, url):  # noqa: F811
    _, api = acme
    body = {"name": "exfil", "sql": SQL, "actions": [{"type": "webhook", "url": url}]}
    response = api.post("/api/v1/rules", body, format="json")
    assert response.status_code == 400 and "this machine" in response.json()["error"]["message"]


@pytest.mark.django_db
def test_a_public_webhook_url_is_saved(acme):  # noqa: F811
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
def test_a_call_reaching_an_internal_address_is_refused_before_a_byte_is_sent(internal, host):
    port = internal.server.server_port
    result = post_signed(f"http://{host}:{port}/hook", "s" * 32, {"a": 1}, rule_id=1, attempts=3)
    assert not result.ok and "no public address" in result.error, result
    assert "127.0.0.1" not in result.error  # the tenant learns no address
    assert result.attempts == 1  # refused for good, not retried
    assert internal.calls == []


def test_an_internal_name_and_a_missing_one_answer_alike():
    """A tenant cannot map the platform's internal names: one resolving inside and one not
    resolving at all get the same words."""
    inside = post_signed("http://localhost:1/", "s" * 32, {}, rule_id=1, attempts=1)
    missing = post_signed("http://no-such-host.invalid:1/", "s" * 32, {}, rule_id=1, attempts=1)
    assert inside.error.replace("localhost", "H") == missing.error.replace(
        "no-such-host.invalid", "H"
    )


def test_the_embedded_platform_calls_loopback_only_where_allowed(internal, monkeypatch):
    """`make run` allows nothing beyond public addresses by default (its demo calls no webhook,
    and its own API, database and Redis listen on loopback); `WEBHOOK_ALLOW` opens a port."""
    refused = post_signed(internal.url, "s" * 32, {"a": 1}, rule_id=1, attempts=1)
    assert not refused.ok and internal.calls == []
    monkeypatch.setenv("WEBHOOK_ALLOW", f"127.0.0.1:{internal.server.server_port}")
    result = post_signed(internal.url, "s" * 32, {"a": 1}, rule_id=1)
    assert result.ok and len(internal.calls) == 1


def test_a_call_is_pinned_to_the_address_it_vetted(internal, monkeypatch):
    """DNS rebinding: the name is resolved once, and the connection goes where it was vetted."""
    port = internal.server.server_port
    monkeypatch.setenv("WEBHOOK_ALLOW", f"127.0.0.1:{port}")
    real, answers = socket.getaddrinfo, []

    def rebinding(host, *args, **kwargs):
        if host != "rebind.test":
            return real(host, *args, **kwargs)
        address = "127.0.0.1" if not answers else "10.0.0.1"  # the second answer is internal
        answers.append(address)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    result = post_signed(f"http://rebind.test:{port}/hook", "s" * 32, {"a": 1}, rule_id=1)
    assert result.ok and answers == ["127.0.0.1"] and len(internal.calls) == 1
    assert internal.calls[0]["headers"]["Host"] == f"rebind.test:{port}"


def test_the_deployed_platform_refuses_private_destinations():
    platform = TERRAFORM / "modules" / "platform" / "main.tf"
    environment = load(platform)["locals"][0]["environment"]
    assert value(environment["WEBHOOK_ALLOW_PRIVATE"]) == "0"


def test_redirects_are_not_followed(internal, monkeypatch):
    monkeypatch.setenv("WEBHOOK_ALLOW", "127.0.0.1")
    internal.statuses = [302]
    result = post_signed(internal.url, "s" * 32, {"a": 1}, rule_id=1, attempts=3)
    assert not result.ok and "redirects are not followed" in result.error
    assert len(internal.calls) == 1

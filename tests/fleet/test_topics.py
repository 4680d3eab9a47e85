"""Unit: the fleet provisioning topics, and what a claim's authorizer lets through."""

from __future__ import annotations

import pytest

from common.fleet.topics import parse
from data_plane.tenancy.fleet_identity import ClaimAuthorizer


@pytest.mark.parametrize(
    ("topic", "operation", "template", "reply"),
    [
        ("$aws/certificates/create/json", "create", "", ""),
        ("$aws/certificates/create-from-csr/json/accepted", "create-from-csr", "", "accepted"),
        ("$aws/provisioning-templates/t1/provision/json/rejected", "provision", "t1", "rejected"),
    ],
)
def test_fleet_topics(topic, operation, template, reply):
    parsed = parse(topic)
    assert (parsed.operation, parsed.template, parsed.reply) == (operation, template, reply)


@pytest.mark.parametrize(
    "topic",
    [
        "$aws/certificates/create/cbor",
        "$aws/certificates/create/json/accepted/x",
        "$aws/certificates/delete/json",
        "$aws/provisioning-templates/+/provision/json",
        "$aws/things/lamp/shadow/update",
        "sensors/1",
    ],
)
def test_not_fleet_topics(topic):
    assert parse(topic) is None


def test_a_claim_may_only_make_its_templates_requests():
    claim = ClaimAuthorizer("abc", 1, "sensors")
    assert claim.can_publish("$aws/certificates/create/json")
    assert claim.can_publish("$aws/provisioning-templates/sensors/provision/json")
    assert not claim.can_publish("$aws/provisioning-templates/other/provision/json")
    assert not claim.can_publish("$aws/certificates/create/json/accepted")  # replies: ours
    assert not claim.can_publish("sensors/1")
    assert claim.can_subscribe("$aws/certificates/create/json/+")
    assert claim.can_subscribe("$aws/provisioning-templates/sensors/provision/json/accepted")
    for refused in ("#", "$aws/#", "$aws/certificates/#", "$aws/certificates/create/json"):
        assert not claim.can_subscribe(refused), refused

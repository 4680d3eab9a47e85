"""Fleet provisioning from the attacker's side, with paho over mTLS: a claim certificate (which a
whole fleet shares, so a weak secret) can do nothing but provision with its own template; another
tenant's ownership token, a spent or revoked claim, an existing device's name, a certificate
created but never registered all get nowhere; and one claimer never reads another's private key."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from common.mqtt.reason_codes import ReasonCode
from tenants.acls import services as acl_services
from tenants.devices import services as device_services
from tenants.fleet import services as fleet
from tests.broker.clients import Paho
from tests.fleet.conftest import make_claim

pytestmark = pytest.mark.django_db(transaction=True)

CREATE = "$aws/certificates/create/json"


def tls(broker, cert: str, key: str) -> dict:
    return {"ca_certs": broker.server_ca, "certfile": cert, "keyfile": key}


def claimer(broker, claim, client_id: str | None = None, *, connect: bool = True) -> Paho:
    return Paho(
        broker.tls_port,
        None,
        None,
        client_id or f"factory-{uuid.uuid4().hex[:6]}",
        tls=tls(broker, claim.cert, claim.key),
        connect=connect,
    )


def ask(client: Paho, topic: str, body: dict) -> tuple[str, dict]:
    """Publish a request; the reply (topic, JSON body) on its accepted or rejected topic."""
    assert client.subscribe(topic + "/+", 1)[0] < 0x80
    client.publish(topic, json.dumps(body), 1)
    reply = client.expect(1, 5)[0]
    return reply.topic.rsplit("/", 1)[1], json.loads(reply.payload)


def provision(claim) -> str:
    return f"$aws/provisioning-templates/{claim.template.name}/provision/json"


def test_a_claim_can_do_nothing_but_provision(tls_broker, claim):
    device_services.device_create(tenant=claim.tenant, name="lamp")
    _, secret = device_services.device_create(tenant=claim.tenant, name="watcher")
    watcher = Paho(tls_broker.port, f"{claim.tenant.slug}/watcher", secret, "watcher")
    watcher.subscribe("#", 1)
    attacker = claimer(tls_broker, claim, "watcher")  # a live device's client id: set apart
    try:
        codes = [attacker.subscribe(f, 1)[0] for f in ("#", "sensors/#", "$aws/things/+/shadow/#")]
        assert [int(getattr(c, "value", c)) for c in codes] == [ReasonCode.NOT_AUTHORIZED] * 3
        other_template = "$aws/provisioning-templates/other/provision/json/accepted"
        assert int(attacker.subscribe(other_template, 1)[0].value) == ReasonCode.NOT_AUTHORIZED
        for topic in ("sensors/lamp/temperature", "$aws/things/lamp/shadow/update"):
            attacker.publish(topic, b'{"state":{"reported":{"hacked":true}}}', 1)
        assert watcher.nothing(1.0)  # nothing reached the tenant's topics
        # A change of the tenant's ACL (allow everything) does not hand the claim its rights.
        acl_services.acl_add(tenant=claim.tenant, action="both", permission="allow", topic="#")
        time.sleep(0.5)  # the broker hears of it
        assert int(attacker.subscribe("sensors/#", 1)[0].value) == ReasonCode.NOT_AUTHORIZED
        attacker.publish("sensors/lamp/temperature", b"99", 1)
        assert watcher.nothing(1.0)
        outcome, body = ask(attacker, CREATE, {})
        assert outcome == "accepted" and body["certificateOwnershipToken"]
        # The device whose client id the claim sent kept its session and connection.
        assert watcher.disconnect_reason is None
        watcher.publish("sensors/watcher/ok", b"still here", 1)
        assert watcher.expect(1)[0].payload == b"still here"
    finally:
        attacker.close()
        watcher.close()


def test_a_token_of_another_tenant_is_rejected(tls_broker, claim, tmp_path):
    other = make_claim(tmp_path / "..", template=claim.template.name)
    theirs = claimer(tls_broker, other)
    mine = claimer(tls_broker, claim)
    try:
        _, made = ask(theirs, CREATE, {})
        token = made["certificateOwnershipToken"]
        outcome, body = ask(
            mine,
            provision(claim),
            {"certificateOwnershipToken": token, "parameters": {"SerialNumber": "x1"}},
        )
        assert outcome == "rejected"
        assert (body["statusCode"], body["errorCode"]) == (400, "InvalidCertificateOwnershipToken")
        from tenants.models import Device

        assert not Device.objects.filter(name="sensor-x1").exists()
    finally:
        theirs.close()
        mine.close()


def test_a_device_never_hears_another_claimers_key(tls_broker, claim):
    first, second = claimer(tls_broker, claim), claimer(tls_broker, claim)
    try:
        assert second.subscribe(CREATE + "/accepted", 1)[0] < 0x80
        ask(first, CREATE, {})
        assert second.nothing(1.0)  # the reply (a private key) went to the requester alone
    finally:
        first.close()
        second.close()


def test_no_takeover_of_an_existing_device_and_no_unregistered_certificate(
    tls_broker, claim, tmp_path
):
    device_services.device_create(tenant=claim.tenant, name="sensor-taken")
    client = claimer(tls_broker, claim)
    try:
        _, made = ask(client, CREATE, {})
        token = made["certificateOwnershipToken"]
        outcome, body = ask(
            client,
            provision(claim),
            {"certificateOwnershipToken": token, "parameters": {"SerialNumber": "taken"}},
        )
        assert outcome == "rejected" and body["statusCode"] == 409
        outcome, body = ask(client, provision(claim), {"certificateOwnershipToken": token})
        assert (outcome, body["errorCode"]) == ("rejected", "InvalidParameters")
    finally:
        client.close()
    (tmp_path / "new.pem").write_text(made["certificatePem"])
    (tmp_path / "new.key").write_text(made["privateKey"])
    unregistered = Paho(
        tls_broker.tls_port,
        None,
        None,
        "sensor-taken",
        tls=tls(tls_broker, str(tmp_path / "new.pem"), str(tmp_path / "new.key")),
        connect=False,
    )
    unregistered.connect(wait=False)
    assert unregistered.connack.wait(5)
    assert unregistered.reason_code == ReasonCode.NOT_AUTHORIZED
    unregistered.close()


def test_a_revoked_claim_provisions_no_more(tls_broker, claim):
    client = claimer(tls_broker, claim)
    try:
        fleet.claim_revoke(fleet.claim_get(claim.template, claim.certificate_id))
        outcome, body = ask(client, CREATE, {})  # the live connection: refused at once
        assert (outcome, body["statusCode"]) == ("rejected", 403)
    finally:
        client.close()
    again = claimer(tls_broker, claim, connect=False)
    again.connect(wait=False)
    assert again.connack.wait(5) and again.reason_code == ReasonCode.NOT_AUTHORIZED
    again.close()

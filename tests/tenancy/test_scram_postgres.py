"""MQTT 5.0 enhanced authentication (SCRAM-SHA-256) against the control plane's tables: every
credential the platform issues carries a SCRAM verifier, so a device proves its secret without
sending it — a real broker process on Postgres, the exchange over a raw socket."""

from __future__ import annotations

import time
from datetime import timedelta
from types import SimpleNamespace

import pytest
from scramp import ScramClient

from common.mqtt.packets import Auth, PacketType
from tenants.devices import services as device_services
from tenants.models import Credential
from tenants.tenant import services as tenant_services
from tests.broker.test_enhanced_auth import METHOD, Raw
from tests.tenancy.test_broker_tenancy import running_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)


def scram_connect(port: int, username: str, secret: str, client_id: str = "s1"):
    """The CONNACK (or the failing packet) of a SCRAM exchange; and the SCRAM client."""
    scram = ScramClient([METHOD], username, secret)
    raw = Raw(
        SimpleNamespace(port=port),
        client_id=client_id,
        username=username,
        properties={
            "authentication_method": METHOD,
            "authentication_data": scram.get_client_first().encode(),
        },
    )
    challenge = raw.next()
    if challenge.type is not PacketType.AUTH:
        return challenge, scram
    scram.set_server_first(challenge.properties["authentication_data"].decode())
    props = {
        "authentication_method": METHOD,
        "authentication_data": scram.get_client_final().encode(),
    }
    raw.send(Auth(0x18, props))
    answer = raw.next()
    raw.sock.close()
    return answer, scram


def test_platform_secrets_authenticate_with_scram_against_postgres():
    tenant = tenant_services.tenant_create("acme")
    device, secret = device_services.device_create(tenant=tenant, name="d1", client_id_policy="any")
    _, legacy_secret = device_services.device_create(
        tenant=tenant, name="old", client_id_policy="any"
    )
    Credential.objects.filter(device__name="old").update(scram_verifier="")  # issued before
    assert Credential.objects.get(device=device).scram_verifier.startswith("scram-sha-256$")
    assert secret not in Credential.objects.get(device=device).scram_verifier
    with running_pg_broker() as port:
        connack, scram = scram_connect(port, "acme/d1", secret)
        assert connack.type is PacketType.CONNACK and connack.reason_code == 0
        scram.set_server_final(connack.properties["authentication_data"].decode())  # server proof
        wrong, _ = scram_connect(port, "acme/d1", "not-the-secret")
        assert wrong.type is PacketType.CONNACK and wrong.reason_code == 0x87
        legacy, _ = scram_connect(port, "acme/old", legacy_secret)
        assert legacy.reason_code == 0x8C  # no verifier: use the password
        _, rotated = device_services.credential_rotate(device, grace=None)  # retire the old one now
        time.sleep(1.0)  # the change reaches the broker's cache through NOTIFY
        stale, _ = scram_connect(port, "acme/d1", secret, "s2")
        fresh, _ = scram_connect(port, "acme/d1", rotated, "s3")
        ghost, _ = scram_connect(port, "acme/nobody", secret, "s4")
    assert stale.reason_code == 0x87 and fresh.reason_code == 0
    assert ghost.reason_code == 0x86


def test_scram_accepts_either_secret_during_a_rotation_grace_period():
    """Both secrets of a device share one salt, so one server-first message fits either; the
    proof decides which secret the connection holds; once the old one expires it is refused."""
    tenant = tenant_services.tenant_create("acme")
    device, old = device_services.device_create(tenant=tenant, name="d1", client_id_policy="any")
    with running_pg_broker() as port:
        # Rotated once the broker is up: its start (seconds on a loaded machine) must not eat
        # the grace period.
        _, new = device_services.credential_rotate(device, grace=timedelta(seconds=4))
        expires = time.monotonic() + 4
        time.sleep(0.5)  # the broker hears of the rotation
        for secret, client in ((old, "a"), (new, "b")):
            connack, scram = scram_connect(port, "acme/d1", secret, client)
            assert connack.type is PacketType.CONNACK and connack.reason_code == 0, secret
            scram.set_server_final(connack.properties["authentication_data"].decode())
        wrong, _ = scram_connect(port, "acme/d1", "not-the-secret", "c")
        assert wrong.reason_code == 0x87
        time.sleep(max(0.0, expires - time.monotonic()) + 0.5)
        expired, _ = scram_connect(port, "acme/d1", old, "d")
        still, _ = scram_connect(port, "acme/d1", new, "e")
    assert expired.reason_code == 0x87 and still.reason_code == 0


def test_reauthenticating_with_the_new_secret_outlives_the_old_one():
    """A device on the old secret re-authenticates (AUTH 0x19) with the new one during the
    grace period: its connection now holds the new secret and survives the old one's expiry; a
    connection that did not move is dropped then."""
    tenant = tenant_services.tenant_create("acme")
    device, old = device_services.device_create(tenant=tenant, name="d1", client_id_policy="any")
    with running_pg_broker() as port:
        movers = []
        for client_id in ("moves", "stays"):
            scram = ScramClient([METHOD], "acme/d1", old)
            raw = Raw(
                SimpleNamespace(port=port),
                client_id=client_id,
                username="acme/d1",
                properties={
                    "authentication_method": METHOD,
                    "authentication_data": scram.get_client_first().encode(),
                },
            )
            challenge = raw.next()
            scram.set_server_first(challenge.properties["authentication_data"].decode())
            raw.send(
                Auth(
                    0x18,
                    {
                        "authentication_method": METHOD,
                        "authentication_data": scram.get_client_final().encode(),
                    },
                )
            )
            assert raw.next().reason_code == 0
            movers.append(raw)
        moves, stays = movers
        _, new = device_services.credential_rotate(device, grace=timedelta(seconds=3))
        time.sleep(0.5)
        scram = ScramClient([METHOD], "acme/d1", new)
        moves.send(
            Auth(
                0x19,
                {
                    "authentication_method": METHOD,
                    "authentication_data": scram.get_client_first().encode(),
                },
            )
        )
        challenge = moves.next()
        assert challenge.type is PacketType.AUTH and challenge.reason_code == 0x18
        scram.set_server_first(challenge.properties["authentication_data"].decode())
        moves.send(
            Auth(
                0x18,
                {
                    "authentication_method": METHOD,
                    "authentication_data": scram.get_client_final().encode(),
                },
            )
        )
        done = moves.next()
        assert done.type is PacketType.AUTH and done.reason_code == 0
        stays.sock.settimeout(6)
        dropped = stays.next()
        assert dropped.type is PacketType.DISCONNECT and dropped.reason_code == 0x98
        moves.sock.settimeout(1.5)
        try:
            still = moves.next()
        except TimeoutError:
            still = "open"
        assert still == "open", still
        moves.sock.close()
        stays.sock.close()

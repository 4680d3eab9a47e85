"""A CA subject is a name anyone may take (issue 28, point 6: "a colliding CA subject breaks
another tenant's device certificates"), end to end on a real broker process over real TLS, paho
as the devices.

The issuer name of a victim's CA is public (every device certificate it issued carries it, and
so does its key identifier). An attacker tenant registers a CA of its own under that name (with
the victim's key identifier copied too), or a self-signed device certificate of that name (no
proof of anything needed), before the victim registers its CA. When the broker let OpenSSL pick
the issuer among all tenants' anchors by name, it picked the attacker's and the victim's devices
failed the TLS handshake ("certificate signature failure", "invalid CA certificate"). A device's
chain must be judged by who signed it, not by whose name it carries: the attacker's anchors
change nothing for the victim's devices, and vouch for none of them.
"""

from __future__ import annotations

import ssl
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from common.security.device_credentials import make_ca, make_leaf, pem_of
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.security.test_device_identity import api, register_ca, tls_broker, write_identity

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def two_tenants():
    acme = tenant_services.tenant_create("acme")
    evil = tenant_services.tenant_create("evil")
    for name in ("sensor-1", "sensor-2", "sensor-3", "watcher"):
        device_services.device_create(tenant=acme, name=name)
    device_services.device_create(tenant=evil, name="e1")
    return acme, evil


def look_alike_ca(victim: x509.Certificate):
    """A CA of the attacker's own key with the victim CA's subject and Subject Key Identifier
    (both are public, and both are whatever the signer writes)."""
    key = ec.generate_private_key(ec.SECP256R1())
    ski = victim.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(victim.subject)
        .issuer_name(victim.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(victim.not_valid_before_utc)
        .not_valid_after(victim.not_valid_after_utc)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def leaf_with_key_identifier(cn: str, ca: x509.Certificate, ca_key):
    """A device certificate naming its issuer's key (Authority Key Identifier), as most CAs
    issue them: no defence either, since the attacker copies the key identifier."""
    key = ec.generate_private_key(ec.SECP256R1())
    plain, _ = make_leaf(cn, ca, ca_key)
    cert = (
        x509.CertificateBuilder()
        .subject_name(plain.subject)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(plain.not_valid_before_utc)
        .not_valid_after(plain.not_valid_after_utc)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert, key


def test_another_tenants_anchor_of_the_same_name_changes_nothing_for_the_victims_devices(
    two_tenants, tmp_path: Path
):
    acme, evil = two_tenants
    owner, attacker = api(acme), api(evil)
    # acme's fleet CA issued its devices' certificates offline; acme registers it only later.
    fleet, fleet_key = make_ca("acme fleet CA")
    no_aki = write_identity(tmp_path, "no-aki", *make_leaf("sensor-1", fleet, fleet_key))
    with_aki = write_identity(
        tmp_path, "aki", *leaf_with_key_identifier("sensor-2", fleet, fleet_key)
    )
    # A second CA of acme's, registered before any collision, for the "before and after" case.
    line, line_key = make_ca("acme line CA")
    assert register_ca(owner, "line", line, line_key).status_code == 201
    line_device = write_identity(tmp_path, "line", *make_leaf("sensor-3", line, line_key))
    # The attacker's squats: its own CAs under acme's CA names (key identifiers copied), and a
    # self-signed certificate named like acme's fleet CA registered for one of its devices.
    squat, squat_key = look_alike_ca(fleet)
    squat_device, _ = make_leaf("acme fleet CA", None, None)
    impostor = write_identity(tmp_path, "impostor", *make_leaf("sensor-1", squat, squat_key))
    _, watcher_secret = device_services.credential_rotate(acme.devices.get(name="watcher"))

    with tls_broker(tmp_path) as ports:
        port, server_ca = ports["mqtts"], tmp_path / "server-ca.pem"

        def connect(identity: tuple[str, str], client_id: str, username: str = "") -> object:
            """CONNACK's reason code, or "handshake" when TLS refused the certificate."""
            tls = {"ca_certs": str(server_ca), "certfile": identity[0], "keyfile": identity[1]}
            client = Paho(port, username, "", client_id, tls=tls, connect=False)
            try:
                client.connect()
            except (ssl.SSLError, OSError):
                return "handshake"
            except AssertionError:  # closed without a CONNACK
                return "closed"
            finally:
                client.close()
            return client.reason_code.value

        assert connect(line_device, "sensor-3") == 0  # before any collision
        assert register_ca(attacker, "squat", squat, squat_key).status_code == 201
        made = attacker.post("/api/v1/devices/e1/certificates", {"pem": pem_of(squat_device)})
        assert made.status_code == 201, made.content
        line_squat, line_squat_key = look_alike_ca(line)
        assert register_ca(attacker, "squat-line", line_squat, line_squat_key).status_code == 201
        assert register_ca(owner, "fleet", fleet, fleet_key).status_code == 201

        # The victim's devices, with and without an Authority Key Identifier, connect as
        # acme's, and what they publish reaches acme's subscriber.
        watcher = Paho(ports["mqtt"], "acme/watcher", watcher_secret, "watcher")
        watcher.subscribe("t/#", qos=1)
        assert connect(line_device, "sensor-3") == 0  # after the collision
        assert connect(with_aki, "sensor-2", "acme/sensor-2") == 0
        tls = {"ca_certs": str(server_ca), "certfile": no_aki[0], "keyfile": no_aki[1]}
        device = Paho(port, "", "", "sensor-1", tls=tls, connect=False)
        device.connect()
        assert device.reason_code == 0
        device.publish("t/fleet", b"from acme's device", qos=1)
        assert [m.payload for m in watcher.expect(1)] == [b"from acme's device"]
        device.close()

        # The attacker's look-alike CA vouches for none of acme's devices: its certificate
        # named like acme's device is no acme device, with or without acme's user name.
        assert connect(impostor, "sensor-1", "acme/sensor-1") != 0
        assert connect(impostor, "sensor-1") != 0  # evil has no sensor-1
        assert watcher.nothing(0.3)
        watcher.close()

        # Another look-alike registered while acme's devices are in use changes nothing.
        again, again_key = look_alike_ca(fleet)
        assert register_ca(attacker, "squat-2", again, again_key).status_code == 201
        time.sleep(0.3)  # the broker hears of it
        assert connect(no_aki, "sensor-1") == 0
        assert connect(with_aki, "sensor-2") == 0

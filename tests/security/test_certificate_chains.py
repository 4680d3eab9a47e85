"""Client certificates beyond one CA and one listener (issue 20, gaps of the last round), end to
end on a real broker process over real TLS:

- a device certificate issued by an intermediate CA verifies when the device sends the chain and
  its tenant registered the root; only a CA some tenant registered anchors a chain, and it names
  the tenant (the attacker's side: look-alike intermediates, unregistered roots, path length);
- a certificate (or an intermediate) that expires while its device is connected ends the
  connection at its notAfter, with DISCONNECT 0x87, counted as a forced disconnect;
- mTLS over the secure WebSocket listener (paho over wss with a client certificate).
"""

from __future__ import annotations

import re
import subprocess
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from common.security.device_credentials import make_ca, make_leaf, pem_of
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.security.test_device_identity import (
    api,
    mosquitto_pub,
    register_ca,
    tls_broker,
    write_identity,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def two_tenants():
    acme = tenant_services.tenant_create("acme")
    evil = tenant_services.tenant_create("evil")
    for name in ("sensor-1", "sensor-2", "sensor-3", "sensor-4"):
        device_services.device_create(tenant=acme, name=name)
    device_services.device_create(tenant=evil, name="e1")
    return acme, evil


def write_chain(directory: Path, name: str, leaf, key, *intermediates) -> tuple[str, str]:
    """The device's certificate followed by the intermediates it sends (one PEM file, as
    mosquitto_pub --cert and Python's load_cert_chain take it), and its key."""
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_text("".join(pem_of(c) for c in (leaf, *intermediates)))
    key_path.write_text(pem_of(key))
    return str(cert_path), str(key_path)


def tls_options(server_ca: Path, identity: tuple[str, str]) -> dict:
    return {"ca_certs": str(server_ca), "certfile": identity[0], "keyfile": identity[1]}


def test_intermediate_issued_devices_verify_against_the_registered_root(two_tenants, tmp_path):
    acme, evil = two_tenants
    owner, attacker = api(acme), api(evil)
    root, root_key = make_ca("acme root", path_length=1)
    intermediate, intermediate_key = make_ca("acme issuing CA", signer=(root, root_key))
    assert register_ca(owner, "root", root, root_key).status_code == 201
    evil_root, evil_key = make_ca("evil root", path_length=1)
    assert register_ca(attacker, "e", evil_root, evil_key).status_code == 201
    leaf, leaf_key = make_leaf("sensor-1", intermediate, intermediate_key)
    chained = write_chain(tmp_path, "chained", leaf, leaf_key, intermediate)
    alone = write_identity(tmp_path, "alone", leaf, leaf_key)  # without its intermediate
    # Attacker: an intermediate of its own root with the victim's intermediate's name, issuing
    # "sensor-1": it anchors at evil's root, so it is evil's device, never acme's.
    look_alike, look_alike_key = make_ca("acme issuing CA", signer=(evil_root, evil_key))
    forged = write_chain(
        tmp_path, "forged", *make_leaf("sensor-1", look_alike, look_alike_key), look_alike
    )
    # An intermediate under a root nobody registered anchors nothing.
    stray_root, stray_key = make_ca("nobody's root", path_length=1)
    stray, stray_int_key = make_ca("stray issuing CA", signer=(stray_root, stray_key))
    unanchored = write_chain(
        tmp_path, "unanchored", *make_leaf("sensor-1", stray, stray_int_key), stray
    )
    # A registered root that allows no CA below it (pathLen 0): its intermediates sign nothing.
    strict_root, strict_key = make_ca("acme strict root", path_length=0)
    assert register_ca(owner, "strict", strict_root, strict_key).status_code == 201
    too_deep_int, too_deep_key = make_ca("under strict", signer=(strict_root, strict_key))
    too_deep = write_chain(
        tmp_path, "deep", *make_leaf("sensor-1", too_deep_int, too_deep_key), too_deep_int
    )
    # A device certificate is no CA: what it "signs" is refused, even under a registered root.
    device_as_ca, device_as_ca_key = make_leaf("sensor-2", root, root_key)
    fake = write_chain(
        tmp_path, "fake", *make_leaf("sensor-1", device_as_ca, device_as_ca_key), device_as_ca
    )
    with tls_broker(tmp_path) as ports:
        port, server_ca = ports["mqtts"], tmp_path / "server-ca.pem"
        assert mosquitto_pub(port, server_ca, *chained) == 0
        assert mosquitto_pub(port, server_ca, *chained, "-u", "acme/sensor-1") == 0
        assert mosquitto_pub(port, server_ca, *alone) != 0  # the chain is the device's to send
        assert mosquitto_pub(port, server_ca, *forged, "-u", "acme/sensor-1") != 0
        assert mosquitto_pub(port, server_ca, *forged) != 0  # evil has no device sensor-1
        assert mosquitto_pub(port, server_ca, *unanchored) != 0
        assert mosquitto_pub(port, server_ca, *too_deep) != 0
        assert mosquitto_pub(port, server_ca, *fake) != 0
        # paho (Python's TLS) sends the chain too; the message lands in acme's namespace.
        watcher = Paho(
            port,
            "",
            "",
            "sensor-2",
            tls=tls_options(
                server_ca,
                write_chain(
                    tmp_path,
                    "watcher",
                    *make_leaf("sensor-2", intermediate, intermediate_key),
                    intermediate,
                ),
            ),
        )
        assert watcher.reason_code == 0
        watcher.client.subscribe("t/#", qos=1)
        time.sleep(0.3)
        device = Paho(port, "acme/sensor-1", "", "sensor-1", tls=tls_options(server_ca, chained))
        assert device.reason_code == 0
        device.client.publish("t/chain", b"via intermediate", qos=1).wait_for_publish(5)
        assert watcher.messages.get(timeout=5).payload == b"via intermediate"
        # Revoking the registered root ends the devices it anchors, within a second.
        started = time.monotonic()
        assert owner.delete("/api/v1/cas/root").status_code == 204
        assert device.disconnected.wait(3) and watcher.disconnected.wait(3)
        assert time.monotonic() - started <= 1.0
        assert mosquitto_pub(port, server_ca, *chained) != 0


def test_chain_made_by_the_openssl_command_line(two_tenants, tmp_path):
    """The same with a root, intermediate and device certificate made by `openssl` itself, as
    an operator would (RSA, v3 extensions from a config section)."""
    acme, _ = two_tenants
    owner = api(acme)

    def openssl(*argv: str) -> None:
        done = subprocess.run(["openssl", *argv], cwd=tmp_path, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode()

    (tmp_path / "ext.cnf").write_text(
        "[ca]\nbasicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n"
        "[leaf]\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=clientAuth\n"
    )
    openssl("genrsa", "-out", "root.key", "2048")
    openssl(
        "req",
        "-x509",
        "-new",
        "-key",
        "root.key",
        "-subj",
        "/CN=openssl root",
        "-days",
        "30",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        "-out",
        "root.pem",
    )
    openssl(
        "req",
        "-new",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "int.key",
        "-subj",
        "/CN=openssl issuing",
        "-out",
        "int.csr",
    )
    openssl(
        "x509",
        "-req",
        "-in",
        "int.csr",
        "-CA",
        "root.pem",
        "-CAkey",
        "root.key",
        "-CAcreateserial",
        "-days",
        "30",
        "-extfile",
        "ext.cnf",
        "-extensions",
        "ca",
        "-out",
        "int.pem",
    )
    openssl(
        "req",
        "-new",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "dev.key",
        "-subj",
        "/CN=sensor-1",
        "-out",
        "dev.csr",
    )
    openssl(
        "x509",
        "-req",
        "-in",
        "dev.csr",
        "-CA",
        "int.pem",
        "-CAkey",
        "int.key",
        "-CAcreateserial",
        "-days",
        "30",
        "-extfile",
        "ext.cnf",
        "-extensions",
        "leaf",
        "-out",
        "dev.pem",
    )
    root = x509.load_pem_x509_certificate((tmp_path / "root.pem").read_bytes())
    root_key = serialization.load_pem_private_key((tmp_path / "root.key").read_bytes(), None)
    assert register_ca(owner, "openssl", root, root_key).status_code == 201
    (tmp_path / "dev-chain.pem").write_text(
        (tmp_path / "dev.pem").read_text() + (tmp_path / "int.pem").read_text()
    )
    chain = (str(tmp_path / "dev-chain.pem"), str(tmp_path / "dev.key"))
    with tls_broker(tmp_path) as ports:
        port, server_ca = ports["mqtts"], tmp_path / "server-ca.pem"
        assert mosquitto_pub(port, server_ca, *chain, "-u", "acme/sensor-1") == 0
        assert mosquitto_pub(port, server_ca, str(tmp_path / "dev.pem"), chain[1]) != 0


def refusals(metrics_port: int, tenant: str, kind: str, code: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read()
    total = 0.0
    for line in text.decode().splitlines():
        if line.startswith("mqtt_refusals_total{") and f'tenant="{tenant}"' in line:
            if f'kind="{kind}"' in line and re.search(
                rf'reason_code="(0x)?{code:x}"|"{code}"', line
            ):
                total += float(line.rsplit(" ", 1)[1])
    return total


def test_a_certificate_expiring_while_connected_ends_the_connection(two_tenants, tmp_path):
    acme, _ = two_tenants
    owner = api(acme)
    root, root_key = make_ca("acme root", path_length=1)
    assert register_ca(owner, "root", root, root_key).status_code == 201
    issued = datetime.now(UTC).replace(microsecond=0)
    short = issued + timedelta(seconds=6)
    # The device's own certificate runs out in 6 s ...
    leaf = write_identity(
        tmp_path, "short", *make_leaf("sensor-1", root, root_key, not_after=short)
    )
    # ... or the intermediate above a long-lived device certificate does.
    brief_int, brief_key = make_ca("brief issuing CA", signer=(root, root_key), not_after=short)
    under = write_chain(
        tmp_path, "under", *make_leaf("sensor-2", brief_int, brief_key, days=30), brief_int
    )
    v3_leaf = write_identity(
        tmp_path, "v3", *make_leaf("sensor-3", root, root_key, not_after=short)
    )
    lasting = write_identity(tmp_path, "lasting", *make_leaf("sensor-4", root, root_key))
    with tls_broker(tmp_path, wss=True) as ports:
        port, server_ca = ports["mqtts"], tmp_path / "server-ca.pem"
        before = refusals(ports["metrics"], "acme", "forced_disconnect", 0x87)
        expiring = Paho(port, "", "", "sensor-1", tls=tls_options(server_ca, leaf))
        chained = Paho(port, "", "", "sensor-2", tls=tls_options(server_ca, under))
        old_protocol = Paho(port, "", "", "sensor-3", v5=False, tls=tls_options(server_ca, v3_leaf))
        steady = Paho(port, "", "", "sensor-4", tls=tls_options(server_ca, lasting))
        assert expiring.reason_code == 0 and chained.reason_code == 0 and steady.reason_code == 0
        assert old_protocol.reason_code == 0
        assert not expiring.disconnected.wait(
            max(0.0, (short - datetime.now(UTC)).total_seconds() - 1)
        )
        for client in (expiring, chained):
            assert client.disconnected.wait(3)
            assert client.disconnect_reason.value == 0x87  # Not authorized, as EMQX
        ended_at = datetime.now(UTC)
        assert ended_at - short <= timedelta(seconds=2.5)
        assert old_protocol.disconnected.wait(3)  # 3.1.1: closed (no DISCONNECT to send)
        assert not steady.disconnected.is_set()  # the others stay
        steady.client.publish("t/still", b"up", qos=1).wait_for_publish(5)
        assert refusals(ports["metrics"], "acme", "forced_disconnect", 0x87) - before >= 3
        # Reconnecting with it now fails at the handshake.
        assert mosquitto_pub(port, server_ca, *leaf) != 0
        steady.close()


def test_mtls_over_secure_websocket(two_tenants, tmp_path):
    acme, evil = two_tenants
    owner, attacker = api(acme), api(evil)
    root, root_key = make_ca("acme root", path_length=1)
    intermediate, intermediate_key = make_ca("acme issuing CA", signer=(root, root_key))
    assert register_ca(owner, "root", root, root_key).status_code == 201
    evil_root, evil_key = make_ca("evil root")
    assert register_ca(attacker, "e", evil_root, evil_key).status_code == 201
    direct = write_identity(tmp_path, "direct", *make_leaf("sensor-1", root, root_key))
    chained = write_chain(
        tmp_path, "chained", *make_leaf("sensor-2", intermediate, intermediate_key), intermediate
    )
    forged = write_identity(tmp_path, "forged", *make_leaf("sensor-1", evil_root, evil_key))
    stranger_ca, stranger_key = make_ca("nobody")
    stranger = write_identity(tmp_path, "x", *make_leaf("sensor-1", stranger_ca, stranger_key))

    def over_wss(identity, username: str = "", client_id: str = "sensor-1", **kw) -> Paho:
        tls = tls_options(server_ca, identity) if identity else {"ca_certs": str(server_ca)}
        return Paho(
            ports["wss"],
            username,
            kw.pop("password", ""),
            client_id,
            transport="websockets",
            tls=tls,
            **kw,
        )

    def refused_over_wss(identity, username: str = "") -> bool:
        client = over_wss(identity, username, "x1", connect=False)
        try:
            client.connect()
        except (OSError, AssertionError):  # handshake refused, or closed without a CONNACK
            return True
        finally:
            client.close()
        return client.reason_code != 0

    with tls_broker(tmp_path, wss=True) as ports:
        server_ca = tmp_path / "server-ca.pem"
        watcher = over_wss(chained, client_id="sensor-2")
        assert watcher.reason_code == 0
        watcher.client.subscribe("t/#", qos=1)
        time.sleep(0.3)
        device = over_wss(direct)
        assert device.reason_code == 0
        device.client.publish("t/wss", b"over wss", qos=1).wait_for_publish(5)
        assert watcher.messages.get(timeout=5).payload == b"over wss"
        # The attacker's registered CA naming acme's device, over wss: not acme's; a CA nobody
        # registered fails the TLS handshake (no CONNACK at all).
        assert refused_over_wss(forged, "acme/sensor-1")
        assert refused_over_wss(forged)  # evil has no device sensor-1
        assert refused_over_wss(stranger)
        # A secret still works on the same listener without a certificate.
        _, secret = device_services.credential_rotate(acme.devices.get(name="sensor-3"))
        by_secret = over_wss(None, "acme/sensor-3", "sensor-3", password=secret)
        assert by_secret.reason_code == 0
        by_secret.close()
        # Revoking the CA ends the wss connections it admitted, within a second.
        started = time.monotonic()
        assert owner.delete("/api/v1/cas/root").status_code == 204
        assert device.disconnected.wait(3) and watcher.disconnected.wait(3)
        assert time.monotonic() - started <= 1.0
        assert device.disconnect_reason.value == 0x98


def test_a_jwt_expiring_while_connected_ends_the_connection(two_tenants, tmp_path):
    """A JWT password holds the connection only until its `exp` (plus the 60 s of clock skew it
    was accepted with): a token that expired 55 s ago by our clock is accepted, for 5 s more."""
    import jwt
    from cryptography.hazmat.primitives.asymmetric import ec

    from tests.security.test_device_identity import pem_of_public

    acme, _ = two_tenants
    owner = api(acme)
    key = ec.generate_private_key(ec.SECP256R1())
    made = owner.post("/api/v1/jwt-keys", {"key": pem_of_public(key), "kid": "k1"}, format="json")
    assert made.status_code == 201, made.content

    def token(sub: str, exp_in: float) -> str:
        now = time.time()
        claims = {"sub": sub, "iat": int(now), "exp": int(now + exp_in)}
        return jwt.encode(claims, key, algorithm="ES256", headers={"kid": "k1"})

    with tls_broker(tmp_path) as ports:
        ending = Paho(ports["mqtt"], "acme/sensor-1", token("sensor-1", -55), "sensor-1")
        lasting = Paho(ports["mqtt"], "acme/sensor-2", token("sensor-2", 300), "sensor-2")
        assert ending.reason_code == 0 and lasting.reason_code == 0
        started = time.monotonic()
        assert ending.disconnected.wait(10)
        assert time.monotonic() - started <= 7.5
        assert ending.disconnect_reason.value == 0x87
        assert not lasting.disconnected.is_set()
        lasting.close()


def test_revoking_a_registered_intermediate_refuses_what_it_signed(two_tenants, tmp_path):
    """A tenant registers its root and its issuing CA; revoking the issuing CA (compromised)
    ends its devices' connections and refuses them afterwards, although the root above it is
    still registered."""
    acme, _ = two_tenants
    owner = api(acme)
    root, root_key = make_ca("acme root", path_length=1)
    issuing, issuing_key = make_ca("acme issuing CA", signer=(root, root_key))
    other, other_key = make_ca("acme other issuing CA", signer=(root, root_key))
    assert register_ca(owner, "root", root, root_key).status_code == 201
    assert register_ca(owner, "issuing", issuing, issuing_key).status_code == 201
    chained = write_chain(
        tmp_path, "chained", *make_leaf("sensor-1", issuing, issuing_key), issuing
    )
    sibling = write_chain(tmp_path, "sibling", *make_leaf("sensor-2", other, other_key), other)
    with tls_broker(tmp_path) as ports:
        port, server_ca = ports["mqtts"], tmp_path / "server-ca.pem"
        live = Paho(port, "", "", "sensor-1", tls=tls_options(server_ca, chained))
        assert live.reason_code == 0
        assert owner.delete("/api/v1/cas/issuing").status_code == 204
        assert live.disconnected.wait(3) and live.disconnect_reason.value == 0x98
        assert mosquitto_pub(port, server_ca, *chained) != 0
        assert mosquitto_pub(port, server_ca, *sibling, client_id="sensor-2") == 0  # root vouches

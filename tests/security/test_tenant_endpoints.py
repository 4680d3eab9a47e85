"""Client certificates from the attacker's side over real TLS, on a real broker process (issue
44): the server name `{tenant}.{MQTT_TLS_DOMAIN}` (SNI) makes a client that tenant's device or
nobody's, as an AWS IoT endpoint names an account; `cryptography`'s verifier refuses what a CA
should not have vouched for (a CA as a device, a weak key), whatever the endpoint."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa

from common.mqtt.codec import encode
from common.mqtt.packets import Connect
from common.security.device_credentials import make_ca, make_leaf
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.security.test_device_identity import api, register_ca, tls_broker, write_identity
from tests.tenancy.test_tls_client_chains import device_certificate

pytestmark = pytest.mark.django_db(transaction=True)

DOMAIN = "mqtt.test"
REFUSED = (4, 5)  # MQTT 3.1.1: bad user name or password, not authorized


def connack(
    port: int,
    server_ca: Path,
    identity: tuple[str, str] | None,
    sni: str,
    user: str = "",
    password: str = "",
):
    """The CONNACK return code (MQTT 3.1.1) a client gets presenting `identity` (or no
    certificate) and `user`/`password` to server name `sni`, or "handshake" when TLS refused
    it."""
    context = ssl.create_default_context(cafile=str(server_ca))
    context.check_hostname = sni != "127.0.0.1"
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # an attacker's client presents even a weak key
    if identity is not None:
        context.load_cert_chain(*identity)
    login = Connect("sensor-1", username=user or None, password=password.encode() or None)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            with context.wrap_socket(raw, server_hostname=sni) as tls:
                tls.sendall(encode(login, 4))
                answer = tls.recv(4)
        except (ssl.SSLError, ConnectionError):
            return "handshake"
    return answer[3] if len(answer) == 4 else "closed"


def test_the_endpoint_names_the_tenant_and_weak_or_ca_certificates_are_refused(tmp_path):
    acme = tenant_services.tenant_create("acme")
    evil = tenant_services.tenant_create("evil")
    device_services.device_create(tenant=acme, name="sensor-1")
    device_services.device_create(tenant=evil, name="sensor-1")
    acme_ca, acme_key = make_ca("acme CA", path_length=None)
    evil_ca, evil_key = make_ca("evil CA")
    assert register_ca(api(acme), "fleet", acme_ca, acme_key).status_code == 201
    assert register_ca(api(evil), "fleet", evil_ca, evil_key).status_code == 201
    acmes = write_identity(tmp_path, "acme", *make_leaf("sensor-1", acme_ca, acme_key))
    evils = write_identity(tmp_path, "evil", *make_leaf("sensor-1", evil_ca, evil_key))
    ca_as_device = write_identity(
        tmp_path, "ca-as-device", *make_ca("sensor-1", signer=(acme_ca, acme_key))
    )
    weak_key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
    weak = device_certificate(acme_ca, acme_key, key=weak_key)
    strong_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    strong = device_certificate(acme_ca, acme_key, key=strong_key)

    with tls_broker(tmp_path, domain=DOMAIN) as ports:
        port, server_ca = ports["mqtts"], tmp_path / "server-ca.pem"
        at_acme, at_evil = f"acme.{DOMAIN}", f"evil.{DOMAIN}"
        assert connack(port, server_ca, acmes, at_acme) == 0
        assert connack(port, server_ca, acmes, "127.0.0.1") == 0  # no endpoint: the CA says
        assert connack(port, server_ca, evils, at_evil) == 0
        # Another tenant's certificate at this tenant's endpoint is nobody's, user name or not.
        assert connack(port, server_ca, evils, at_acme) in REFUSED
        assert connack(port, server_ca, evils, at_acme, "acme/sensor-1") in REFUSED
        assert connack(port, server_ca, acmes, at_evil) in REFUSED
        assert connack(port, server_ca, acmes, at_acme, "evil/sensor-1") in REFUSED
        # What acme's CA signed but a device's certificate must not be: refused at CONNECT.
        assert connack(port, server_ca, ca_as_device, at_acme) in REFUSED
        assert (
            connack(
                port, server_ca, write_identity(tmp_path, "rsa-2048", strong, strong_key), at_acme
            )
            == 0
        )
        weak_identity = write_identity(tmp_path, "rsa-1024", weak, weak_key)
        assert connack(port, server_ca, weak_identity, at_acme) in REFUSED  # at CONNECT


def test_a_password_client_at_another_tenants_endpoint_is_refused(tmp_path):
    """The endpoint names the tenant for clients without a certificate too (issue 44): valid
    credentials of one tenant presented at another tenant's endpoint are refused (not
    authorized), at their own tenant's endpoint or with no endpoint named they work."""
    acme = tenant_services.tenant_create("acme")
    evil = tenant_services.tenant_create("evil")
    _, acme_secret = device_services.device_create(tenant=acme, name="sensor-1")
    _, evil_secret = device_services.device_create(tenant=evil, name="sensor-1")

    with tls_broker(tmp_path, domain=DOMAIN) as ports:
        port, server_ca = ports["mqtts"], tmp_path / "server-ca.pem"
        at_acme, at_evil = f"acme.{DOMAIN}", f"evil.{DOMAIN}"
        acme_login = {"user": "acme/sensor-1", "password": acme_secret}
        evil_login = {"user": "evil/sensor-1", "password": evil_secret}
        assert connack(port, server_ca, None, at_acme, **acme_login) == 0
        assert connack(port, server_ca, None, "127.0.0.1", **evil_login) == 0  # no endpoint
        assert connack(port, server_ca, None, at_evil, **evil_login) == 0
        assert connack(port, server_ca, None, at_acme, **evil_login) == 5  # not authorized
        assert connack(port, server_ca, None, at_evil, **acme_login) == 5

"""Device identity beyond secrets (issue 20, point 2), end to end: a tenant registers a CA, a
device certificate or JWT keys through the REST API; real clients (mosquitto_pub with
--cert/--key, paho with a JWT) connect to a real broker process on the test Postgres over TLS;
refusals from the attacker's side (another tenant's CA, expired, revoked, wrong key, another
tenant's device in `sub`)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from django.conf import settings
from django.db import connection
from rest_framework.test import APIClient

from common.runtime.processes import data_plane_command
from common.security.device_credentials import make_ca, make_leaf, pem_of
from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def tls_broker(
    directory: Path, *, wss: bool = False, domain: str | None = None
) -> Iterator[dict[str, int]]:
    """A broker on the test database with a TLS listener (server certificate from a CA of our
    own; `wss`: secure WebSocket too, and metrics; `domain`: tenant endpoints
    `{tenant}.{domain}`, the server certificate naming them): its ports by listener name."""
    ca, ca_key = make_ca("broker test CA")
    names = ["localhost", "127.0.0.1"] + ([f"*.{domain}"] if domain else [])
    server, server_key = make_leaf("localhost", ca, ca_key, server_names=names)
    (directory / "server-ca.pem").write_text(pem_of(ca))
    (directory / "server.pem").write_text(pem_of(server))
    (directory / "server.key").write_text(pem_of(server_key))
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    tls = ["--tls-port", "0", "--tls-cert", str(directory / "server.pem")]
    tls += ["--tls-key", str(directory / "server.key"), "--log-level", "INFO"]
    if domain:
        tls += ["--tls-domain", domain]
    wanted = {"mqtt", "ws", "mqtts"}
    if wss:
        tls += ["--wss-port", "0", "--metrics-port", "0"]
        wanted |= {"wss", "metrics"}
    process = subprocess.Popen(
        data_plane_command(port=0, ws_port=0, database_url=url, extra=tls),
        cwd=settings.BASE_DIR,
        stdout=subprocess.PIPE,
        text=True,
    )
    ports: dict[str, int] = {}
    try:
        while not wanted <= set(ports):
            line = process.stdout.readline()
            assert line, "broker exited"
            if line.startswith("LISTENING"):
                _, name, address = line.split()
                ports[name] = int(address.rsplit(":", 1)[1])
        connection.close()
        yield ports
    finally:
        process.terminate()
        process.wait(timeout=10)


def api(tenant) -> APIClient:
    """An API client holding a token of an owner of `tenant`."""
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.create_user(
        username=f"owner@{tenant.slug}.io", email=f"owner@{tenant.slug}.io", password="x" * 20
    )
    account_services.membership_add(tenant=tenant, user=user, role="owner")
    _, raw = account_services.api_token_create(user=user, tenant=tenant)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def register_ca(client: APIClient, name: str, ca, ca_key, *, code: str | None = None):
    """POST /cas as a tenant does: with a verification certificate signed by the CA whose CN is
    the tenant's registration code (proof of the CA's key)."""
    code = code or client.get("/api/v1/cas/registration-code").json()["registration_code"]
    verification, _ = make_leaf(code, ca, ca_key, days=1)
    body = {"name": name, "pem": pem_of(ca), "verification_pem": pem_of(verification)}
    return client.post("/api/v1/cas", body, format="json")


def write_identity(directory: Path, name: str, cert, key) -> tuple[str, str]:
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_text(pem_of(cert))
    key_path.write_text(pem_of(key))
    return str(cert_path), str(key_path)


def mosquitto_pub(
    port: int, ca: Path, cert: str, key: str, *extra: str, client_id: str = "sensor-1"
) -> int:
    """Exit status of one mosquitto_pub over TLS with a client certificate (0: published)."""
    argv = ["mosquitto_pub", "-h", "127.0.0.1", "-p", str(port), "--cafile", str(ca)]
    argv += ["-i", client_id]
    argv += ["--cert", cert, "--key", key, "-t", "t/cert", "-m", "hi", "-q", "1", *extra]
    return subprocess.run(argv, capture_output=True, timeout=15).returncode


@pytest.fixture
def two_tenants():
    acme = tenant_services.tenant_create("acme")
    evil = tenant_services.tenant_create("evil")
    device_services.device_create(tenant=acme, name="sensor-1")
    device_services.device_create(tenant=acme, name="sensor-2")
    device_services.device_create(tenant=evil, name="e1")
    return acme, evil


def test_ca_registration_api_validates_and_scopes(two_tenants):
    acme, evil = two_tenants
    owner, attacker = api(acme), api(evil)
    ca, ca_key = make_ca("acme devices")
    leaf, _ = make_leaf("x", ca, ca_key)
    code = owner.get("/api/v1/cas/registration-code").json()["registration_code"]
    verification = pem_of(make_leaf(code, ca, ca_key)[0])
    bad = owner.post(
        "/api/v1/cas",
        {"name": "x", "pem": pem_of(leaf), "verification_pem": verification},
        format="json",
    )
    assert bad.status_code == 400 and "not a CA" in json.dumps(bad.json())
    garbage = owner.post(
        "/api/v1/cas", {"name": "x", "pem": "hello", "verification_pem": "x"}, format="json"
    )
    assert garbage.status_code == 400 and garbage.json()["error"]["fields"]["pem"]
    unproven = owner.post("/api/v1/cas", {"name": "x", "pem": pem_of(ca)}, format="json")
    assert unproven.status_code == 400 and "verification_pem" in unproven.json()["error"]["fields"]
    made = register_ca(owner, "fleet", ca, ca_key)
    assert made.status_code == 201, made.content
    assert made.json()["subject"] == "CN=acme devices"
    # The attacker cannot see it, revoke it, or claim the (public) CA certificate for itself:
    # it has no verification certificate the CA signed for its own registration code.
    assert attacker.get("/api/v1/cas/fleet").status_code == 404
    assert attacker.delete("/api/v1/cas/fleet").status_code == 404
    assert attacker.get("/api/v1/cas").json()["count"] == 0
    replayed = attacker.post(
        "/api/v1/cas",
        {"name": "mine", "pem": pem_of(ca), "verification_pem": verification},
        format="json",
    )
    assert replayed.status_code == 400 and "registration code" in json.dumps(replayed.json())
    own_ca, own_key = make_ca("evil CA")
    evil_code = attacker.get("/api/v1/cas/registration-code").json()["registration_code"]
    assert evil_code != code
    forged = attacker.post(
        "/api/v1/cas",
        {
            "name": "mine",
            "pem": pem_of(ca),
            "verification_pem": pem_of(make_leaf(evil_code, own_ca, own_key)[0]),
        },
        format="json",
    )
    assert forged.status_code == 400 and "not signed by this CA" in json.dumps(forged.json())
    assert attacker.get("/api/v1/cas").json()["count"] == 0


def test_mtls_devices_connect_with_mosquitto_and_are_refused_otherwise(two_tenants, tmp_path):
    acme, evil = two_tenants
    owner, attacker = api(acme), api(evil)
    ca, ca_key = make_ca("acme fleet CA")
    evil_ca, evil_key = make_ca("evil CA")
    assert register_ca(owner, "fleet", ca, ca_key).status_code == 201
    assert register_ca(attacker, "e", evil_ca, evil_key).status_code == 201
    good = write_identity(tmp_path, "sensor-1", *make_leaf("sensor-1", ca, ca_key))
    other = write_identity(tmp_path, "sensor-2", *make_leaf("sensor-2", ca, ca_key))
    unknown_ca, unknown_key = make_ca("nobody's CA")
    stranger = write_identity(tmp_path, "s", *make_leaf("sensor-1", unknown_ca, unknown_key))
    # The attacker's own (registered) CA, naming the victim's device: identifies evil, not acme.
    forged = write_identity(tmp_path, "forged", *make_leaf("sensor-1", evil_ca, evil_key))
    past = datetime.now(UTC) - timedelta(days=30)
    expired = write_identity(
        tmp_path,
        "expired",
        *make_leaf("sensor-1", ca, ca_key, not_before=past, not_after=past + timedelta(days=1)),
    )
    with tls_broker(tmp_path) as ports:
        port, server_ca = ports["mqtts"], tmp_path / "server-ca.pem"
        assert mosquitto_pub(port, server_ca, *good) == 0  # no user name: the certificate says
        assert mosquitto_pub(port, server_ca, *good, "-u", "acme/sensor-1") == 0
        assert mosquitto_pub(port, server_ca, *good, "-u", "acme/sensor-2") != 0  # disagrees
        assert mosquitto_pub(port, server_ca, *stranger) != 0  # a CA nobody registered
        assert mosquitto_pub(port, server_ca, *expired) != 0
        assert mosquitto_pub(port, server_ca, *forged, "-u", "acme/sensor-1") != 0
        assert mosquitto_pub(port, server_ca, *forged) != 0  # evil has no device sensor-1
        # Without a certificate, passwords work on the same listener as before.
        _, secret = device_services.credential_rotate(acme.devices.get(name="sensor-1"))
        by_secret = Paho(
            port, "acme/sensor-1", secret, "sensor-1", tls={"ca_certs": str(server_ca)}
        )
        assert by_secret.reason_code == 0
        by_secret.close()
        # Live connections end within a second of a revocation; new ones are refused.
        tls = {
            "ca_certs": str(server_ca),
            "certfile": other[0],
            "keyfile": other[1],
        }
        live = Paho(port, "", "", "sensor-2", tls=tls)
        assert live.reason_code == 0
        started = time.monotonic()
        assert owner.delete("/api/v1/cas/fleet").status_code == 204
        assert live.disconnected.wait(3)
        assert time.monotonic() - started <= 1.0
        assert live.disconnect_reason.value == 0x98
        assert mosquitto_pub(port, server_ca, *good) != 0


def test_device_certificate_by_fingerprint(two_tenants, tmp_path):
    acme, evil = two_tenants
    owner, attacker = api(acme), api(evil)
    cert, key = make_leaf("whatever-cn", None, None)  # self-signed, registered by fingerprint
    paths = write_identity(tmp_path, "own", cert, key)
    made = owner.post("/api/v1/devices/sensor-1/certificates", {"pem": pem_of(cert)})
    assert made.status_code == 201, made.content
    certificate_id = made.json()["id"]
    # The attacker can neither see nor revoke it. It may register the same certificate for one
    # of its own devices, and gains nothing: a certificate registered by fingerprint counts only
    # with the user name of the device it was registered for.
    assert attacker.get("/api/v1/devices/sensor-1/certificates").status_code == 404
    path = f"/api/v1/devices/sensor-1/certificates/{certificate_id}"
    assert attacker.delete(path).status_code == 404
    assert (
        attacker.post("/api/v1/devices/e1/certificates", {"pem": pem_of(cert)}).status_code == 201
    )
    again = owner.post("/api/v1/devices/sensor-2/certificates", {"pem": pem_of(cert)})
    assert again.status_code == 400  # once per tenant
    with tls_broker(tmp_path) as ports:
        port, server_ca = ports["mqtts"], tmp_path / "server-ca.pem"
        assert mosquitto_pub(port, server_ca, *paths, "-u", "acme/sensor-1") == 0
        assert mosquitto_pub(port, server_ca, *paths) != 0  # which device? the user name says
        assert mosquitto_pub(port, server_ca, *paths, "-u", "acme/sensor-2") != 0
        # The victim's device, as it always connects, lands in its own tenant: a subscriber of
        # acme sees its message, evil's device of the same certificate is another identity.
        watcher_tls_options = watcher_tls(tmp_path, server_ca, owner)
        watcher = Paho(port, "acme/sensor-2", "", "sensor-2", tls=watcher_tls_options)
        watcher.client.subscribe("t/#", qos=1)
        time.sleep(0.3)
        assert mosquitto_pub(port, server_ca, *paths, "-u", "acme/sensor-1") == 0
        assert watcher.messages.get(timeout=5).topic == "t/cert"
        watcher.close()
        tls = {"ca_certs": str(server_ca), "certfile": paths[0], "keyfile": paths[1]}
        live = Paho(port, "acme/sensor-1", "", "sensor-1", tls=tls)
        assert live.reason_code == 0
        started = time.monotonic()
        assert owner.delete(path).status_code == 204
        assert live.disconnected.wait(3)
        assert time.monotonic() - started <= 1.0
        assert mosquitto_pub(port, server_ca, *paths) != 0


def watcher_tls(directory: Path, server_ca: Path, owner: APIClient) -> dict:
    """A second acme device (sensor-2) with its own registered certificate, to watch acme's
    topics over TLS."""
    cert, key = make_leaf("sensor-2", None, None)
    made = owner.post("/api/v1/devices/sensor-2/certificates", {"pem": pem_of(cert)})
    assert made.status_code == 201, made.content
    certfile, keyfile = write_identity(directory, "watcher", cert, key)
    return {"ca_certs": str(server_ca), "certfile": certfile, "keyfile": keyfile}


def _token(key, alg: str, sub: str, *, exp_in: float = 300, kid: str | None = None) -> str:
    now = time.time()
    headers = {"kid": kid} if kid else None
    claims = {"sub": sub, "iat": int(now), "exp": int(now + exp_in)}
    return jwt.encode(claims, key, algorithm=alg, headers=headers)


def test_jwt_passwords_with_paho(two_tenants, tmp_path):
    acme, evil = two_tenants
    owner, attacker = api(acme), api(evil)
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    evil_key = ec.generate_private_key(ec.SECP256R1())
    made = owner.post(
        "/api/v1/jwt-keys", {"key": pem_of_public(rsa_key), "kid": "rsa-1"}, format="json"
    )
    assert made.status_code == 201, made.content
    assert made.json()[0]["algorithm"] == "RS256"
    jwks = {"keys": [dict(json.loads(jwt.algorithms.ECAlgorithm.to_jwk(ec_key.public_key())))]}
    jwks["keys"][0]["kid"] = "ec-1"
    made = owner.post("/api/v1/jwt-keys", {"key": json.dumps(jwks)}, format="json")
    assert made.status_code == 201 and made.json()[0]["algorithm"] == "ES256"
    private = attacker.post("/api/v1/jwt-keys", {"key": pem_of(evil_key), "kid": "k"})
    assert private.status_code == 400 and "private" in json.dumps(private.json())
    assert (
        attacker.post("/api/v1/jwt-keys", {"key": pem_of_public(evil_key), "kid": "k"}).status_code
        == 201
    )
    assert attacker.get("/api/v1/jwt-keys").json()["count"] == 1  # only its own
    with tls_broker(tmp_path) as ports:
        port = ports["mqtt"]

        def connack(username: str, token: str, client_id: str = "sensor-1") -> int:
            client = Paho(port, username, token, client_id)
            code = client.reason_code.value
            client.close()
            return code

        assert connack("acme/sensor-1", _token(rsa_key, "RS256", "sensor-1", kid="rsa-1")) == 0
        assert connack("acme/sensor-1", _token(ec_key, "ES256", "acme/sensor-1")) == 0
        assert connack("acme/sensor-1", _token(ec_key, "ES256", "sensor-1", exp_in=-120)) == 0x86
        assert connack("acme/sensor-1", _token(ec_key, "ES256", "sensor-2")) == 0x86  # not me
        assert connack("acme/sensor-1", _token(ec_key, "ES256", "x", exp_in=7 * 86400)) == 0x86
        # Attacker side: its own (registered) key cannot speak for acme's device ...
        assert connack("acme/sensor-1", _token(evil_key, "ES256", "sensor-1")) == 0x86
        assert connack("acme/sensor-1", _token(evil_key, "ES256", "acme/sensor-1")) == 0x86
        # ... nor can a token for acme's device get into evil's namespace.
        assert connack("evil/e1", _token(evil_key, "ES256", "acme/sensor-1"), "e1") == 0x86
        # A skew within 60 s is tolerated (an exp 30 s ago still passes).
        assert connack("acme/sensor-1", _token(ec_key, "ES256", "sensor-1", exp_in=-30)) == 0
        # Revoking the key ends the connections it admitted, within a second.
        live = Paho(port, "acme/sensor-1", _token(ec_key, "ES256", "sensor-1"), "sensor-1")
        assert live.reason_code == 0
        started = time.monotonic()
        assert owner.delete("/api/v1/jwt-keys/ec-1").status_code == 204
        assert live.disconnected.wait(3)
        assert time.monotonic() - started <= 1.0
        assert connack("acme/sensor-1", _token(ec_key, "ES256", "sensor-1")) == 0x86
        # Passwords keep working beside JWTs.
        _, secret = device_services.credential_rotate(acme.devices.get(name="sensor-2"))
        assert connack("acme/sensor-2", secret, "sensor-2") == 0


def pem_of_public(private_key) -> str:
    from cryptography.hazmat.primitives import serialization

    return (
        private_key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )

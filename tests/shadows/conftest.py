"""Device shadows end to end: a real broker process on the test database with a TLS listener,
and tenants whose devices prove who they are with certificates of a CA the tenant registered
(AWS IoT's way: the SDK sends no secret), as `tests/security/test_device_identity.py` does."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection

from common.runtime.processes import data_plane_command
from common.security.device_credentials import make_ca, make_leaf, pem_of
from tenants.accounts import services as account_services
from tenants.devices import identity
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services


@dataclass
class TlsBroker:
    process: subprocess.Popen
    folder: Path
    listeners: dict[str, int] = field(default_factory=dict)

    @property
    def port(self) -> int:
        return self.listeners["mqtt"]

    @property
    def tls_port(self) -> int:
        return self.listeners["mqtts"]

    @property
    def server_ca(self) -> str:
        return str(self.folder / "server-ca.pem")

    @property
    def objects(self) -> str:
        """Its object store (the archive: the rules' inputs)."""
        return f"file://{self.folder / 'objects'}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process.stdout.close()


def database_url() -> str:
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def start_tls_broker(folder: Path, *extra: str, env: dict | None = None) -> TlsBroker:
    """A broker on the test database with a TLS listener whose certificate (for localhost and
    127.0.0.1) a CA of our own signed: `server-ca.pem` in `folder` is what clients trust."""
    ca, ca_key = make_ca("shadow tests server CA")
    server, server_key = make_leaf("localhost", ca, ca_key, server_names=["localhost", "127.0.0.1"])
    (folder / "server-ca.pem").write_text(pem_of(ca))
    (folder / "server.pem").write_text(pem_of(server))
    (folder / "server.key").write_text(pem_of(server_key))
    tls = ["--tls-port", "0", "--tls-cert", str(folder / "server.pem")]
    tls += ["--tls-key", str(folder / "server.key"), "--log-level", "INFO"]
    tls += ["--archive-interval", "0.2"]
    process = subprocess.Popen(
        data_plane_command(port=0, ws_port=0, database_url=database_url(), extra=[*tls, *extra]),
        env={**os.environ, "OBJECT_STORE_URL": f"file://{folder / 'objects'}", **(env or {})},
        cwd=settings.BASE_DIR,
        stdout=subprocess.PIPE,
        stderr=open(folder / "broker.log", "w"),
        text=True,
    )
    broker = TlsBroker(process, folder)
    while not {"mqtt", "mqtts"} <= set(broker.listeners):
        line = process.stdout.readline()
        if not line:
            broker.stop()
            raise RuntimeError((folder / "broker.log").read_text())
        if line.startswith("LISTENING"):
            _, name, address = line.split()
            broker.listeners[name] = int(address.rsplit(":", 1)[1])
    connection.close()  # the broker and the tests share the database
    return broker


@pytest.fixture(scope="package")
def tls_broker(tmp_path_factory, django_db_setup, django_db_blocker) -> Iterator[TlsBroker]:
    """One broker for the shadow tests (each test makes a tenant of its own). Only while they
    run: a broker on the test database outside a cluster would take the REST API's shadow
    changes that a cluster under test should publish (tests/cluster/test_shadows.py)."""
    with django_db_blocker.unblock():
        broker = start_tls_broker(
            tmp_path_factory.mktemp("shadow-broker"), "--usage-flush-interval", "0.5"
        )
    yield broker
    broker.stop()


@dataclass
class Fleet:
    """A tenant whose CA is registered, with devices and their certificates on disk."""

    tenant: object
    folder: Path
    ca: object
    ca_key: object
    secrets: dict[str, str] = field(default_factory=dict)  # device -> its secret

    @property
    def slug(self) -> str:
        return self.tenant.slug

    def device(self, name: str, **fields) -> tuple[str, str]:
        """Create device `name` and its certificate: (certificate path, key path); its secret
        is kept in `secrets`."""
        _, self.secrets[name] = device_services.device_create(
            tenant=self.tenant, name=name, **fields
        )
        return self.certificate(name)

    def certificate(self, common_name: str) -> tuple[str, str]:
        cert, key = make_leaf(common_name, self.ca, self.ca_key)
        stem = f"{self.slug}-{common_name}-{uuid.uuid4().hex[:6]}"
        cert_path, key_path = self.folder / f"{stem}.pem", self.folder / f"{stem}.key"
        cert_path.write_text(pem_of(cert))
        key_path.write_text(pem_of(key))
        return str(cert_path), str(key_path)


def make_fleet(folder: Path, prefix: str = "sh") -> Fleet:
    tenant = tenant_services.tenant_create(f"{prefix}{uuid.uuid4().hex[:8]}")
    ca, ca_key = make_ca(f"{tenant.slug} devices")
    verification, _ = make_leaf(identity.registration_code(tenant), ca, ca_key, days=1)
    identity.ca_register(
        tenant=tenant, name="fleet", pem=pem_of(ca), verification_pem=pem_of(verification)
    )
    return Fleet(tenant, folder, ca, ca_key)


@pytest.fixture
def fleet(tmp_path) -> Fleet:
    return make_fleet(tmp_path)


def api_client(tenant, role: str = "owner"):
    """An API client holding a token of a member of `tenant` with `role`."""
    from django.contrib.auth import get_user_model
    from rest_framework.test import APIClient

    email = f"{role}-{uuid.uuid4().hex[:6]}@{tenant.slug}.io"
    user = get_user_model().objects.create_user(username=email, email=email, password="x" * 20)
    account_services.membership_add(tenant=tenant, user=user, role=role)
    _, raw = account_services.api_token_create(user=user, tenant=tenant)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


class Watcher:
    """A paho MQTT 5 client of a device (secret over TCP), subscribed to its shadow's topics:
    the messages it gets, as (topic, JSON body) pairs."""

    def __init__(self, port: int, fleet: Fleet, device: str, *, subscribe: str = "") -> None:
        from tests.broker.clients import Paho

        secret = fleet.secrets[device]
        self.paho = Paho(port, f"{fleet.slug}/{device}", secret, device)
        self.paho.subscribe(subscribe or f"$aws/things/{device}/shadow/#", 1)

    def get(self, count: int, timeout: float = 5.0) -> list[tuple[str, dict]]:
        import json

        return [(m.topic, json.loads(m.payload)) for m in self.paho.expect(count, timeout)]

    def close(self) -> None:
        self.paho.close()

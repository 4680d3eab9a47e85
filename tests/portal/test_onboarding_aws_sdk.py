"""The "Get started" page's snippet for AWS's device SDK (awsiotsdk), pasted into a file beside
the device's certificate, its key and broker-ca.pem as the page names them, and run: it connects
to the broker's TLS listener and its message arrives (issue 41, point 5)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from common.security.device_credentials import make_leaf, pem_of
from tenants.devices import identity, onboarding
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.shadows.conftest import start_tls_broker

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_aws_sdk_snippet_publishes_over_tls(tmp_path):
    tenant = tenant_services.tenant_create("acme-sdk")
    device, secret = device_services.device_create(tenant=tenant, name="sensor-1")
    _, watcher_secret = device_services.device_create(tenant=tenant, name="watcher")
    certificate, key = make_leaf("sensor-1", None, None)
    identity.device_certificate_register(device=device, pem=pem_of(certificate))
    broker = start_tls_broker(tmp_path)
    try:
        watcher = Paho(broker.port, "acme-sdk/watcher", watcher_secret, "watcher")
        watcher.subscribe("hello/#", 1)
        snippet = {
            s.key: s
            for s in onboarding.snippets(
                host="127.0.0.1",
                port=broker.port,
                username=device.username,
                client_id=device.name,
                password=secret,
                topic=onboarding.hello_topic(device.name),
                tls_port=broker.tls_port,
            )
        }["awsiotsdk"]
        here = tmp_path / "device"
        here.mkdir()
        cert_file, key_file = onboarding.aws_sdk_files(device.name)
        (here / cert_file).write_text(pem_of(certificate))
        (here / key_file).write_text(pem_of(key))
        shutil.copy(broker.server_ca, here / onboarding.BROKER_CA_FILE)
        (here / "hello.py").write_text(snippet.code)
        done = subprocess.run(
            [sys.executable, "hello.py"], cwd=here, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0 and "published" in done.stdout, done.stdout + done.stderr
        message = watcher.messages.get(timeout=10)
        assert (message.topic, message.payload) == ("hello/sensor-1", b"hello from awsiotsdk")
        watcher.close()
    finally:
        broker.stop()

"""The broker on the control plane's tables: authentication, ACLs, quotas and propagation of
changes to live connections, with real clients against a real broker process and Postgres."""

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.db import connection

from common.runtime.processes import data_plane_command
from tenants.acls import services as acl_services
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho

pytestmark = pytest.mark.django_db(transaction=True)


def start_pg_broker(*extra: str) -> tuple[subprocess.Popen, int]:
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    process = subprocess.Popen(
        data_plane_command(
            port=0, ws_port=0, database_url=url, extra=["--log-level", "INFO", *extra]
        ),
        cwd=settings.BASE_DIR,
        stdout=subprocess.PIPE,
        text=True,
    )
    ports = {}
    while "mqtt" not in ports or "ws" not in ports:
        line = process.stdout.readline()
        assert line, "broker exited"
        if line.startswith("LISTENING"):
            _, name, address = line.split()
            ports[name] = int(address.rsplit(":", 1)[1])
    connection.close()  # the broker and the test share the database; keep ours fresh
    return process, ports["mqtt"]


@contextmanager
def running_pg_broker(*extra: str) -> Iterator[int]:
    """A broker on the test database for the block: its MQTT port."""
    process, port = start_pg_broker(*extra)
    try:
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def pg_broker():
    with running_pg_broker() as port:
        yield port


@pytest.fixture
def acme():
    tenant = tenant_services.tenant_create("acme")
    _, secret = device_services.device_create(
        tenant=tenant, name="sensor-1", client_id_policy="any"
    )
    _, other = device_services.device_create(tenant=tenant, name="sensor-2", client_id_policy="any")
    return tenant, secret, other


def wait_disconnected(client: Paho, within: float) -> float:
    started = time.monotonic()
    assert client.disconnected.wait(within + 2), "still connected"
    return time.monotonic() - started


def test_credentials_from_the_control_plane(pg_broker, acme):
    tenant, secret, _ = acme
    ok = Paho(pg_broker, "acme/sensor-1", secret, "c1")
    assert ok.reason_code == 0
    ok.close()
    assert Paho(pg_broker, "acme/sensor-1", "wrong", "c2").reason_code == 0x86
    assert Paho(pg_broker, "nope/sensor-1", secret, "c3").reason_code == 0x86
    assert Paho(pg_broker, "acme/sensor-1", "wrong", "c4", v5=False).reason_code == 0x86  # rc 4


def test_rotation_disconnects_within_a_second(pg_broker, acme):
    tenant, secret, _ = acme
    client = Paho(pg_broker, "acme/sensor-1", secret, "rot")
    device = tenant.devices.get(name="sensor-1")
    device_services.credential_rotate(device, grace=None)  # retire the old secret now
    assert wait_disconnected(client, 1.0) <= 1.0
    assert client.disconnect_reason.value == 0x98  # administrative action
    assert Paho(pg_broker, "acme/sensor-1", secret, "rot").reason_code == 0x86


def test_rotation_with_grace_keeps_the_device_connected_until_the_old_secret_expires(
    pg_broker, acme
):
    """Two secrets without downtime: after a rotation with a grace period, the connection on the
    old secret stays up and the old secret still connects; at expiry that connection is
    dropped (0x98) and the old secret refused, while one on the new secret stays."""
    tenant, old, _ = acme
    device = tenant.devices.get(name="sensor-1")
    on_old = Paho(pg_broker, "acme/sensor-1", old, "old-1")
    _, new = device_services.credential_rotate(device, grace=timedelta(seconds=4))
    expires_at = device.credentials.get(retired_at__isnull=False).expires_at
    time.sleep(1.0)  # the rotation has reached the broker
    assert not on_old.disconnected.is_set(), "the rotation dropped the old secret's connection"
    on_new = Paho(pg_broker, "acme/sensor-1", new, "new-1")
    assert on_new.reason_code == 0
    again = Paho(pg_broker, "acme/sensor-1", old, "old-2")  # reconnecting with the old secret
    assert again.reason_code == 0
    # Traffic flows on both until then.
    on_new.subscribe("grace/#", 1)
    on_old.publish("grace/t", b"from-old", 1)
    assert on_new.messages.get(timeout=5).payload == b"from-old"
    assert wait_disconnected(on_old, 6.0) <= 6.0
    assert wait_disconnected(again, 1.0) <= 1.0
    dropped_at = datetime.now(UTC)
    assert dropped_at >= expires_at and (dropped_at - expires_at).total_seconds() < 2.0
    assert on_old.disconnect_reason.value == 0x98
    assert not on_new.disconnected.is_set()
    assert Paho(pg_broker, "acme/sensor-1", old, "old-3").reason_code == 0x86
    assert Paho(pg_broker, "acme/sensor-1", new, "new-2").reason_code == 0
    states = {c.id: c.state for c in device.credentials.all()}
    assert sorted(states.values()) == ["active", "expired"]


def test_retiring_the_old_secret_now_drops_only_its_connections(pg_broker, acme):
    tenant, old, _ = acme
    device = tenant.devices.get(name="sensor-1")
    _, new = device_services.credential_rotate(device, grace=timedelta(hours=24))
    on_old = Paho(pg_broker, "acme/sensor-1", old, "o")
    on_new = Paho(pg_broker, "acme/sensor-1", new, "n")
    assert on_old.reason_code == 0 and on_new.reason_code == 0
    retiring = device.credentials.get(retired_at__isnull=False)
    assert retiring.state == "retiring"
    device_services.credential_retire_now(retiring)
    assert wait_disconnected(on_old, 1.0) <= 1.0
    time.sleep(0.3)
    assert not on_new.disconnected.is_set()
    assert Paho(pg_broker, "acme/sensor-1", old, "o2").reason_code == 0x86


def test_a_device_never_holds_more_than_two_secrets(acme):
    tenant, first, _ = acme
    device = tenant.devices.get(name="sensor-1")
    device_services.credential_rotate(device)
    device_services.credential_rotate(device)
    states = sorted(c.state for c in device.credentials.all())
    assert states == ["active", "retiring", "revoked"]


def test_disabled_device_and_suspended_tenant(pg_broker, acme):
    tenant, secret, other = acme
    first = Paho(pg_broker, "acme/sensor-1", secret, "s1")
    second = Paho(pg_broker, "acme/sensor-2", other, "s2")
    device_services.device_update(tenant.devices.get(name="sensor-1"), enabled=False)
    assert wait_disconnected(first, 1.0) <= 1.0
    assert not second.disconnected.is_set()
    assert Paho(pg_broker, "acme/sensor-1", secret, "s1").reason_code == 0x87
    tenant_services.tenant_set_status(tenant, "suspended")
    assert wait_disconnected(second, 1.0) <= 1.0
    assert Paho(pg_broker, "acme/sensor-2", other, "s2").reason_code == 0x8A  # banned


def test_acl_rules_apply_to_live_connections(pg_broker, acme):
    tenant, secret, other = acme
    acl_services.acl_add(tenant=tenant, action="both", permission="deny", topic="secret/#")
    listener = Paho(pg_broker, "acme/sensor-2", other, "acl-l")
    assert listener.subscribe("secret/#", 1)[0].value == 0x87
    listener.subscribe("open/#", 1)
    client = Paho(pg_broker, "acme/sensor-1", secret, "acl-c")
    denied = client.client.publish("secret/x", "no", 1)
    denied.wait_for_publish(5)
    client.publish("open/x", "yes", 1)
    assert [m.payload for m in listener.expect(1)] == [b"yes"]
    acl_services.acl_add(
        tenant=tenant, action="publish", permission="deny", topic="open/#", position=0
    )
    time.sleep(1.0)  # the change reaches live connections through NOTIFY
    client.publish("open/x", "now denied", 1)
    assert listener.nothing(0.5)
    client.close(), listener.close()


def test_max_connections_quota(pg_broker, acme):
    tenant, secret, _ = acme
    tenant_services.tenant_set_quota(tenant, {"max_connections": 1})
    time.sleep(0.3)
    first = Paho(pg_broker, "acme/sensor-1", secret, "q1")
    assert first.reason_code == 0
    assert Paho(pg_broker, "acme/sensor-1", secret, "q2").reason_code == 0x97
    first.close()


def test_events_topics_usage_and_last_seen(acme):
    import json

    from tenants.models import Device, Usage

    tenant, secret, other = acme
    process, port = start_pg_broker()
    try:
        watcher = Paho(port, "acme/sensor-2", other, "watcher")
        watcher.subscribe("$events/#", 0)
        watcher.subscribe("data/#", 0)
        device = Paho(port, "acme/sensor-1", secret, "dev-1")
        for i in range(3):
            device.publish("data/t", f"v{i}", 1)
        device.close()
        got = watcher.expect(5, 3)
        topics = [m.topic for m in got]
        assert "$events/client_connected" in topics and "$events/client_disconnected" in topics
        event = json.loads(next(m.payload for m in got if m.topic == "$events/client_connected"))
        assert event["clientid"] == "dev-1" and event["username"] == "acme/sensor-1"
        watcher.close()
        time.sleep(0.3)
    finally:
        process.terminate()  # a graceful stop flushes the current minute
        assert process.wait(timeout=15) == 0
    usage = Usage.objects.filter(tenant=tenant)
    assert sum(u.messages_in for u in usage) == 3
    assert sum(u.bytes_in for u in usage) == 6
    assert sum(u.messages_out for u in usage) == 3
    assert sum(u.connection_seconds for u in usage) >= 0
    assert Device.objects.get(tenant=tenant, name="sensor-1").last_seen_at is not None


def test_attacker_from_tenant_a_never_sees_tenant_b(pg_broker):
    """Tenant `evil` tries every way into tenant `acme`'s traffic."""
    acme = tenant_services.tenant_create("acme")
    evil = tenant_services.tenant_create("evil")
    _, acme_secret = device_services.device_create(
        tenant=acme, name="victim", client_id_policy="any"
    )
    _, evil_secret = device_services.device_create(tenant=evil, name="spy", client_id_policy="any")
    spy = Paho(pg_broker, "evil/spy", evil_secret, "spy")
    for topic_filter in ("#", "+/#", "$SYS/#", "$share/g/#", "$events/#", "acme/#", "+/+/+"):
        spy.subscribe(topic_filter, 1)
    victim = Paho(pg_broker, "acme/victim", acme_secret, "victim-id")
    victim.publish("acme/secret", "for acme only", 1, retain=True)
    victim.publish("evil/secret", "still acme's", 1)
    victim.close()
    # Impersonation attempts: acme's client id, acme's username with evil's secret, bad names.
    hijack = Paho(pg_broker, "evil/spy", evil_secret, "victim-id")  # same id, other tenant
    assert hijack.reason_code == 0  # allowed: client ids are scoped to the tenant...
    assert not hijack.session_present  # ...so it is a different session
    hijack.close()
    attempts = {
        "acme/victim + evil secret": ("acme/victim", evil_secret),
        "extra slash": ("evil/spy/extra", evil_secret),
        "missing slash": ("evilspy", evil_secret),
        "empty username": ("", evil_secret),
        "64 KiB username": ("e" * 65535, evil_secret),
    }
    for name, (username, password) in attempts.items():
        client = Paho(pg_broker, username, password, "x")
        assert client.reason_code.value == 0x86, name
        client.close()
    wrong = [Paho(pg_broker, "acme/victim", f"guess-{i}", "x").reason_code.value for i in range(25)]
    assert set(wrong) <= {0x86, 0x9F} and 0x9F in wrong  # guessing in bulk gets throttled
    time.sleep(1.0)
    leaked = [m for m in spy.expect(500, 1.0) if b"acme" in m.payload or m.topic.endswith("secret")]
    assert leaked == []
    spy.close()

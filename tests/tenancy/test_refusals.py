"""Operators see what the broker refuses: a wrong password, an ACL denial, a quota refusal and a
malformed packet each leave a log line (tenant, device, address, reason code) and raise the
tenant's counter on `/metrics` — a real broker process on the test database, real paho clients,
and raw bytes for the malformed packet."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from django.db import connection
from prometheus_client.parser import text_string_to_metric_families

from common.runtime.processes import data_plane_command
from tenants.acls import services as acl_services
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho

pytestmark = pytest.mark.django_db(transaction=True)


@contextmanager
def broker_with_metrics(
    log: Path, *extra: str, preexec_fn: Callable[[], None] | None = None
) -> Iterator[dict[str, int]]:
    """A broker process on the test database, logging JSON lines to `log`; its ports by
    listener name (`preexec_fn`: run in the child first, e.g. to lower its limits)."""
    db = connection.settings_dict
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    with open(log, "w") as err:
        process = subprocess.Popen(
            data_plane_command(
                port=0,
                ws_port=0,
                database_url=url,
                extra=["--metrics-port", "0", "--log-level", "WARNING", *extra],
            ),
            cwd=settings.BASE_DIR,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, "LOG_FORMAT": "json"},
            preexec_fn=preexec_fn,
        )
    ports: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 30
        while {"mqtt", "ws", "metrics"} - set(ports) and time.monotonic() < deadline:
            line = process.stdout.readline()
            assert line, f"broker exited: {log.read_text()}"
            if line.startswith("LISTENING"):
                _, name, address = line.split()
                ports[name] = int(address.rsplit(":", 1)[1])
        connection.close()
        yield ports
    finally:
        process.terminate()
        process.wait(timeout=15)


def refusals(port: int) -> dict[tuple[str, str, str], float]:
    """`mqtt_refusals_total` from a scrape: (tenant, kind, reason code) -> count."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "mqtt_refusals_total":
                labels = sample.labels
                found[(labels["tenant"], labels["kind"], labels["reason_code"])] = sample.value
    return found


def log_lines(log: Path) -> list[dict]:
    lines = []
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("logger") == "data_plane.refusals":
            lines.append(record)
    return lines


def wait_for(predicate, within: float = 5.0):
    deadline = time.monotonic() + within
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.1)


def test_each_refusal_is_logged_and_counted_per_tenant(tmp_path):
    tenant = tenant_services.tenant_create("refused")
    _, secret = device_services.device_create(
        tenant=tenant, name="sensor-1", client_id_policy="any"
    )
    kicked, kicked_secret = device_services.device_create(tenant=tenant, name="sensor-2")
    acl_services.acl_add(tenant=tenant, action="both", permission="deny", topic="secret/#")
    tenant_services.tenant_set_quota(tenant, {"max_subscriptions_per_client": 1})
    bystander = tenant_services.tenant_create("bystander")
    device_services.device_create(tenant=bystander, name="b-1", client_id_policy="any")
    log = tmp_path / "broker.log"
    with broker_with_metrics(log) as ports:
        mqtt, metrics = ports["mqtt"], ports["metrics"]

        # Three wrong passwords.
        for attempt in range(3):
            refused = Paho(mqtt, "refused/sensor-1", "wrong", f"bad-{attempt}")
            refused.close()  # no automatic retry
            assert refused.reason_code == 0x86
        # An ACL denial (publish) and one (subscribe).
        client = Paho(mqtt, "refused/sensor-1", secret, "good")
        assert client.reason_code == 0
        client.client.publish("secret/x", "no", 1).wait_for_publish(5)
        assert client.subscribe("secret/#", 1)[0].value == 0x87
        # A quota refusal: the second subscription beyond max_subscriptions_per_client=1.
        assert client.subscribe("open/a", 0)[0].value == 0
        assert client.subscribe("open/b", 0)[0].value == 0x97
        # A malformed packet after a good CONNECT: PUBLISH with QoS 3 (MQTT-3.3.1-4).
        with socket.create_connection(("127.0.0.1", mqtt), timeout=5) as sock:
            client_id = b"raw"
            user, password = b"refused/sensor-1", secret.encode()
            body = (
                b"\x00\x04MQTT\x04\xc2\x00\x3c"
                + len(client_id).to_bytes(2, "big")
                + client_id
                + len(user).to_bytes(2, "big")
                + user
                + len(password).to_bytes(2, "big")
                + password
            )
            sock.sendall(bytes([0x10, len(body)]) + body)
            assert sock.recv(4)[:4] == b"\x20\x02\x00\x00"
            sock.sendall(b"\x36\x05\x00\x01t\x00\x01")  # PUBLISH flags QoS 3: malformed
            assert wait_for(lambda: sock.recv(16) == b"", 5) is True  # the broker closes
        client.close()
        # A forced disconnect: the operator disables a connected device (DISCONNECT 0x98).
        victim = Paho(mqtt, "refused/sensor-2", kicked_secret, "sensor-2")
        assert victim.reason_code == 0
        device_services.device_update(kicked, enabled=False)
        assert victim.disconnected.wait(5)
        victim.close()

        def counted():
            found = refusals(metrics)
            mine = {k: v for k, v in found.items() if k[0] == "refused"}
            kinds = {kind for (_, kind, _) in mine}
            want = {
                "auth_failed",
                "acl_denied",
                "quota_exceeded",
                "malformed_packet",
                "forced_disconnect",
            }
            return mine if want <= kinds else None

        mine = wait_for(counted)
        assert mine, refusals(metrics)
        assert mine[("refused", "auth_failed", "0x86")] == 3
        assert mine[("refused", "acl_denied", "0x87")] == 2
        assert mine[("refused", "quota_exceeded", "0x97")] == 1
        assert sum(v for (_, k, _), v in mine.items() if k == "malformed_packet") == 1
        assert mine[("refused", "forced_disconnect", "0x98")] == 1
        # Per tenant: the bystander tenant was refused nothing.
        assert not [k for k in refusals(metrics) if k[0] == "bystander"]

        lines = log_lines(log)
        by_kind = {}
        for line in lines:
            by_kind.setdefault(line["kind"], []).append(line)
        assert len(by_kind["auth_failed"]) == 3
        for kind in ("auth_failed", "acl_denied", "quota_exceeded", "malformed_packet"):
            line = by_kind[kind][0]
            assert line["tenant"] == "refused", line
            assert line["device"] == "sensor-1", line
            assert line["address"].startswith("127.0.0.1:"), line
            assert re.fullmatch(r"0x[0-9a-f]{2}", line["reason_code"]), line
            assert line["level"] == "WARNING"
        assert by_kind["acl_denied"][0]["reason_code"] == "0x87"
        assert "secret/" in by_kind["acl_denied"][0]["reason"]
        kick = [x for x in by_kind["forced_disconnect"] if x["reason_code"] == "0x98"]
        assert kick and kick[0]["device"] == "sensor-2" and kick[0]["tenant"] == "refused"


def test_a_flood_of_failures_is_counted_in_full_but_logged_sparingly(tmp_path):
    tenant = tenant_services.tenant_create("flooded")
    device_services.device_create(tenant=tenant, name="sensor-1", client_id_policy="any")
    log = tmp_path / "broker.log"
    with broker_with_metrics(log) as ports:
        for attempt in range(12):
            Paho(ports["mqtt"], "flooded/sensor-1", "wrong", f"f-{attempt}").close()
        found = wait_for(lambda: refusals(ports["metrics"]).get(("flooded", "auth_failed", "0x86")))
        # Failures from one address get throttled (0x9f) after a while: count every refusal.
        total = sum(v for k, v in refusals(ports["metrics"]).items() if k[0] == "flooded")
        assert found and total == 12
        lines = [x for x in log_lines(log) if x["tenant"] == "flooded"]
        assert 1 <= len(lines) <= 6, lines  # a burst of 5, then one per 10 s


def test_strangers_names_never_become_metric_labels(tmp_path):
    """Anyone may type any tenant name: 20 strangers posing as the platform's own identities
    (`NAME/$rules`, `NAME/$portal`), with a JWT-looking password, or as a device, add no
    series to `/metrics`; their refusals are counted under the one label for no tenant."""
    log = tmp_path / "broker.log"
    jwt_like = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"
    with broker_with_metrics(log) as ports:
        for n in range(20):
            name = f"stranger{n}"
            username = (f"{name}/$rules", f"{name}/$portal", f"{name}/dev", f"{name}/jwt")[n % 4]
            password = jwt_like if username.endswith("/jwt") else "anything"
            Paho(ports["mqtt"], username, password, f"$rules-{n}" if n % 4 == 0 else "").close()
        counted = wait_for(lambda: sum(refusals(ports["metrics"]).values()) >= 20)
        tenants = {key[0] for key in refusals(ports["metrics"])}
    assert counted
    assert tenants == {""}


def _ws_upgrade(port: int) -> socket.socket:
    """A raw socket through the broker's WebSocket upgrade on `/mqtt` (subprotocol mqtt)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(
        b"GET /mqtt HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
        b"Sec-WebSocket-Protocol: mqtt\r\n\r\n"
    )
    answer = b""
    while b"\r\n\r\n" not in answer:
        chunk = sock.recv(1024)
        assert chunk, answer
        answer += chunk
    assert answer.startswith(b"HTTP/1.1 101"), answer
    return sock


def test_refused_wills_and_websocket_framing_errors_are_logged_and_counted(tmp_path):
    """A will the ACL denies when it goes out (the rule added after CONNECT), and WebSocket
    frames the broker cannot parse (an unmasked client frame; bad upgrade bytes): each a log line
    and a per-tenant count, like every other refusal."""
    tenant = tenant_services.tenant_create("willful")
    _, secret = device_services.device_create(
        tenant=tenant, name="sensor-1", client_id_policy="any"
    )
    log = tmp_path / "broker.log"
    with broker_with_metrics(log) as ports:
        mqtt, metrics = ports["mqtt"], ports["metrics"]
        dying = Paho(mqtt, "willful/sensor-1", secret, "dying", will=("lastwill/dying", "gone", 1))
        assert dying.reason_code == 0  # the will topic is allowed at CONNECT
        acl_services.acl_add(tenant=tenant, action="publish", permission="deny", topic="lastwill/#")
        # The broker has the new ACL once a probe's publish there is denied (0x87 PUBACK).
        probe = Paho(mqtt, "willful/sensor-1", secret, "probe")
        watcher = Paho(mqtt, "willful/sensor-1", secret, "watcher")
        watcher.subscribe("lastwill/#", 1)

        def denied_once():
            probe.client.publish("lastwill/probe", "x", 1).wait_for_publish(5)
            return refusals(metrics).get(("willful", "acl_denied", "0x87"))

        assert wait_for(denied_once, 10) == 1
        dying.close(abrupt=True)  # no DISCONNECT: the will goes out, and the ACL refuses it
        assert wait_for(lambda: refusals(metrics).get(("willful", "acl_denied", "0x87")) == 2)
        assert watcher.nothing(0.5)

        # WebSocket: a client frame without a mask (RFC 6455 §5.1: the server must close).
        ws = ports["ws"]
        with _ws_upgrade(ws) as sock:
            sock.sendall(b"\x82\x02\x10\x00")  # FIN + binary, unmasked, 2 bytes
            assert wait_for(lambda: sock.recv(64) is not None, 5)
        # A frame with reserved bits set, after a good upgrade.
        with _ws_upgrade(ws) as sock:
            sock.sendall(b"\xf2\x80\x00\x00\x00\x00")
            assert wait_for(lambda: sock.recv(64) is not None, 5)
        unattributed = lambda: refusals(metrics).get(("", "malformed_packet", "0x81"))  # noqa: E731
        assert wait_for(lambda: unattributed() == 2), refusals(metrics)
        for client in (probe, watcher):
            client.close()

    lines = log_lines(log)
    wills = [x for x in lines if x["kind"] == "acl_denied" and x["reason"].startswith("will ")]
    assert len(wills) == 1, lines
    assert wills[0]["tenant"] == "willful" and wills[0]["device"] == "sensor-1"
    assert wills[0]["client_id"] == "dying" and "lastwill/dying" in wills[0]["reason"]
    frames = [x for x in lines if x["kind"] == "malformed_packet"]
    assert len(frames) == 2, lines
    assert all(x["reason"].startswith("WebSocket:") for x in frames)
    assert all(x["address"].startswith("127.0.0.1:") for x in frames)
    assert any("1002" in x["reason"] for x in frames)

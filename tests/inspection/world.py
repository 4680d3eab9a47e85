"""A tenant's broker state made the way devices make it, for the inspection tests: real paho
clients against a real broker on the test database.

`acme` ends up with four sessions: `live-clean` (online, clean, subscribed to `sensors/+/temp`),
`parked` (persistent, offline, five QoS 1 messages queued), `pub` (online, the publisher) and
`slow` (persistent, online, Receive Maximum 2, not reading: two messages in flight and three
queued); and three retained messages: `sensors/a/temp` (JSON), `sensors/b/temp` (text),
`config/x` (binary)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from rest_framework.test import APIClient

from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tests.broker.clients import Paho

PAYLOADS = [b'{"job": 1, "name": "calibrate"}', b"hello", bytes(range(8)), b"4", b"5"]
RETAINED = {
    "sensors/a/temp": b'{"t": 20.5}',
    "sensors/b/temp": b"21.5 C",
    "config/x": b"\x00\x01\xff",
}


@dataclass
class Tenant:
    slug: str
    token: str
    secret: str
    api: APIClient
    clients: list[Paho] = field(default_factory=list)

    def client(self, client_id: str, **options) -> Paho:
        made = Paho(self.port, f"{self.slug}/sensor-1", self.secret, client_id, **options)
        assert made.reason_code == 0, made.reason_code
        self.clients.append(made)
        return made

    def close(self) -> None:
        for client in self.clients:
            try:
                # A client whose loop was stopped cannot send DISCONNECT: its socket goes.
                client.close(abrupt=client.client._thread is None)
            except Exception:
                pass


def tenant(slug: str, port: int, email: str | None = None, password: str = "pass-w0rd-x") -> Tenant:
    made, _, token = account_services.signup(
        tenant=slug, email=email or f"owner@{slug}.io", password=password
    )
    _, secret = device_services.device_create(tenant=made, name="sensor-1", client_id_policy="any")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    out = Tenant(slug, token, secret, api)
    out.port = port
    return out


def until(condition, within: float = 10.0, step: float = 0.1, seen=None):
    """`condition()` once true; fails after `within` seconds (saying `seen()`, if given)."""
    deadline = time.monotonic() + within
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"not within {within}s: {seen() if seen else ''}"
        time.sleep(step)


def json_of(response) -> dict:
    assert response.status_code == 200, (response.status_code, response.content[:500])
    return json.loads(response.content)


def build_acme(acme: Tenant) -> None:
    """The sessions and retained messages described above, once the API sees them all."""
    watcher = acme.client("live-clean")
    watcher.subscribe("sensors/+/temp", 0)
    slow = acme.client("slow", clean=True, expiry=600, properties={"ReceiveMaximum": 2})
    slow.subscribe("jobs/#", 1)
    parked = acme.client("parked", clean=True, expiry=3600)
    parked.subscribe("jobs/#", 1)
    parked.close()
    slow.stop_loop()  # connected but reading nothing: what it was sent stays in flight
    pub = acme.client("pub")
    for payload in PAYLOADS:
        pub.publish("jobs/1", payload, qos=1)  # acknowledged once the queues are committed
    for topic, payload in RETAINED.items():
        pub.publish(topic, payload, qos=1, retain=True)

    seen = {}

    def settled():
        sessions = {s["client_id"]: s for s in json_of(acme.api.get("/api/v1/sessions"))["results"]}
        retained = json_of(acme.api.get("/api/v1/retained"))["count"]
        seen.update(sessions=sessions, retained=retained)
        slow_row = sessions.get("slow") or {}
        return (
            len(sessions) == 4
            and retained == 3
            and (slow_row.get("queued"), slow_row.get("inflight")) == (3, 2)
            # the broker records the end of a session's connection just after it (expires_at)
            and (sessions.get("parked") or {}).get("expires_at")
        )

    until(settled, seen=lambda: seen)

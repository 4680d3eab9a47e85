"""The pre-provisioning hook: the broker asks the template's URL before it makes the device, with
the request's parameters; a 2xx answer allows, anything else refuses (AccessDenied)."""

from __future__ import annotations

import json
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tenants.models import Device
from tests.fleet.conftest import make_claim
from tests.fleet.test_attacker import CREATE, ask, claimer, provision

pytestmark = pytest.mark.django_db(transaction=True)


class Hook(BaseHTTPRequestHandler):
    calls: list = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.calls.append(body)
        refuse = body["parameters"].get("SerialNumber", "").startswith("bad")
        self.send_response(403 if refuse else 200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def hook():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()


def test_the_hook_may_refuse(tls_broker, hook, tmp_path):
    claim = make_claim(tmp_path, pre_provisioning_hook_url=hook)
    client = claimer(tls_broker, claim)
    good, bad = uuid.uuid4().hex[:6], "bad" + uuid.uuid4().hex[:6]
    try:
        for serial, expected in ((bad, "rejected"), (good, "accepted")):
            _, made = ask(client, CREATE, {})
            outcome, body = ask(
                client,
                provision(claim),
                {
                    "certificateOwnershipToken": made["certificateOwnershipToken"],
                    "parameters": {"SerialNumber": serial},
                },
            )
            assert outcome == expected, body
        assert body["thingName"] == f"sensor-{good}"
    finally:
        client.close()
    asked = [call["parameters"]["SerialNumber"] for call in Hook.calls]
    assert bad in asked and good in asked
    assert Hook.calls[-1]["templateName"] == "sensors"
    names = set(Device.objects.filter(tenant=claim.tenant).values_list("name", flat=True))
    assert names == {f"sensor-{good}"}

"""`$claim-…` traffic is the tenant's (issue 44 point 4): a claim connection's requests and the
replies fleet provisioning sends it are metered as the tenant's messages, to the device
`$claim` (AWS bills fleet provisioning's MQTT messages as messaging), beside its CONNECT and
SUBSCRIBEs; the platform's own traffic stays unbilled."""

from __future__ import annotations

import time

import pytest

from common.security.service_token import is_platform_client
from data_plane.broker.accounting import Accounts
from data_plane.broker.hooks import Hooks
from data_plane.broker.message import Message
from data_plane.broker.session import Delivery
from data_plane.fleet.service import PUBLISHER
from tenants.models import DeviceUsage
from tests.fleet.test_attacker import CREATE, ask, claimer

pytestmark = pytest.mark.django_db(transaction=True)


class Receiver:
    def __init__(self, client_id: str, device: str) -> None:
        self.tenant, self.client_id, self.device = "acme", client_id, device


def test_claim_requests_and_replies_are_billed_and_the_platforms_are_not():
    accounts = Accounts(Hooks())
    request = Message(CREATE, b"{}", 1, False, {}, None, "$claim-factory", "acme", "$claim")
    assert accounts.received(request)
    reply = Message(CREATE + "/accepted", b"x" * 6_000, 1, False, {}, None, PUBLISHER, "acme")
    accounts.delivered(Receiver("$claim-factory", "$claim"), Delivery(reply, 1, False), 6_000)
    stats = accounts.stats["acme"]
    assert stats.device_units["$claim"] == 1 + 2  # the request, the 6 KB reply's two units
    assert stats.message_units == 3
    assert is_platform_client("$portal-abc") and is_platform_client("$aws-shadow")
    live = Message("$SYS/broker/uptime", b"1", 0, True, {}, None, "$SYS", "acme")
    accounts.delivered(Receiver("$portal-abc", "$portal"), Delivery(live, 0, False), 1)
    assert stats.message_units == 3 and stats.system_sent == 1


def test_a_claims_traffic_is_in_the_tenants_usage(tls_broker, claim):
    client = claimer(tls_broker, claim)
    try:
        outcome, body = ask(client, CREATE, {})  # a SUBSCRIBE, a request, a reply (< 5 KB)
        assert outcome == "accepted" and len(body["privateKey"]) < 5_000
    finally:
        client.close()
    # The broker writes a minute once it is over (and flushes every few seconds); the traffic
    # may straddle two minutes.
    deadline = time.monotonic() + 150
    while True:
        row = DeviceUsage.objects.filter(tenant=claim.tenant, device="$claim").first()
        if row is not None and row.message_units >= 4:
            break
        assert time.monotonic() < deadline, f"the claim's usage: {row and row.message_units}"
        time.sleep(0.5)
    # CONNECT 1 + SUBSCRIBE 1 + the request 1 + its reply 1 (each under 5 KB): before, only
    # the CONNECT and the SUBSCRIBE were billed.
    assert row.message_units == 4
    assert row.connection_minutes >= 1

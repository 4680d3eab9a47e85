"""A client event's `reason` is words a person understands, right for its event (issue 41): no
token the broker records (`tcp_closed`, `keepalive_timeout`, `0x95`…) reaches the API as is. The
same through a real broker and the REST API: tests/journey/test_journey_broker.py."""

from types import SimpleNamespace

import pytest

from common.mqtt.reason_codes import ReasonCode as RC
from data_plane.broker.stats import DISCONNECT_REASONS
from data_plane.observability.journey import JourneyRecorder
from tenants.journey.words import describe_event

# Every token `MQTTConnection.disconnect_reason` can hold (data_plane/broker/connection.py,
# actions.Close, inbound.disconnect), a hex code for the others, and none at all.
TOKENS = [
    *DISCONNECT_REASONS.values(),
    "normal",
    "tcp_closed",
    "sock_error",
    "server_closed",
    "0x95",
    "0x81",
    "0x96",
    "",
]


def _recorded(reason: str) -> dict:
    recorder = JourneyRecorder("vm-a")
    conn = SimpleNamespace(tenant="acme", client_id="c", disconnect_reason=reason)
    recorder._disconnected(conn)
    (row,) = recorder.events
    return {**row, "ts": None}


@pytest.mark.parametrize("token", TOKENS)
def test_every_disconnect_token_is_said_in_words(token):
    described = describe_event(_recorded(token))
    reason = described["reason"]
    assert reason != token, reason
    title = reason.partition(": ")[0]  # "Keep-alive timeout: the broker heard…"
    assert "_" not in title and not title.startswith("0x") and len(reason.split()) > 4, reason


def test_a_connect_is_a_success_and_a_disconnect_is_normal():
    recorder = JourneyRecorder("vm-a")
    conn = SimpleNamespace(
        tenant="acme",
        client_id="c",
        peer="127.0.0.1:5000",
        protocol_version=5,
        clean_start=True,
        session=SimpleNamespace(expiry_interval=0),
        disconnect_reason="normal",
    )
    recorder._connected(conn)
    recorder._disconnected(conn)
    connected, disconnected = (describe_event({**row, "ts": None}) for row in recorder.events)
    assert (connected["reason_code_text"], connected["reason"]) == ("0x00 Success", "connected")
    assert disconnected["reason_code_text"] == "0x00 Normal disconnection"
    assert disconnected["reason"].startswith("Normal disconnection: the device sent DISCONNECT")
    dropped = describe_event(_recorded("tcp_closed"))
    assert "closed the connection without sending DISCONNECT" in dropped["reason"]


def test_a_refusal_without_a_reason_of_its_own_says_its_code():
    # The broker says "authentication failed" of any refused CONNECT that came without words:
    # a redirect (0x9C) or a bad authentication method (0x8C) is not a failed login.
    row = {
        "ts": None,
        "event": "connect_failed",
        "version": 1,
        "reason_code": RC.USE_ANOTHER_SERVER,
        "reason": "authentication failed",
    }
    assert describe_event(row)["reason"].startswith("Use another server: the broker sent")
    row.update(reason_code=RC.BAD_AUTHENTICATION_METHOD)
    assert describe_event(row)["reason"].startswith("Bad authentication method: the device")
    row.update(reason_code=RC.BAD_USER_NAME_OR_PASSWORD, reason="bad user name or password")
    assert describe_event(row)["reason"] == "bad user name or password"  # its own words stay

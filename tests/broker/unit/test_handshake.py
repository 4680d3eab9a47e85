"""`handshake.Handshake` through a fake connection: what a CONNECT's answer is, what a refusal
does (returned, not done), the wait for an earlier CONNECT's CONNACK (a future, no polling) and
re-authentication's protocol errors."""

from __future__ import annotations

import asyncio

from common.mqtt.packets import MQTT_3_1_1, MQTT_5_0, Auth, Connect, Will
from common.mqtt.reason_codes import ReasonCode as RC
from data_plane.broker.actions import Close, Disconnect, SendNow
from data_plane.broker.auth import AuthResult
from data_plane.broker.handshake import CONNACK_WAIT, Handshake, Refusal
from tests.broker.unit.fakes import FakeConnection, make_broker, open_session, told


def _connect(password: bytes = b"pw1", **kw) -> Connect:
    kw.setdefault("protocol_version", MQTT_5_0)
    return Connect("c-d1", username="acme/d1", password=password, **kw)


async def test_a_good_password_is_let_in_and_a_bad_one_refused():
    handshake = Handshake(FakeConnection(make_broker()))
    result = await handshake.authenticate(_connect())
    assert isinstance(result, AuthResult) and (result.tenant, result.device) == ("acme", "d1")
    refusal = await handshake.authenticate(_connect(b"wrong"))
    assert refusal == Refusal(RC.BAD_USER_NAME_OR_PASSWORD, "bad user name or password")


async def test_an_unknown_method_and_a_311_empty_id_without_clean_session_are_refused():
    handshake = Handshake(FakeConnection(make_broker()))
    scram = _connect(properties={"authentication_method": "NOPE"})
    assert (await handshake.authenticate(scram)).reason_code == RC.BAD_AUTHENTICATION_METHOD
    anonymous = Connect("", protocol_version=MQTT_3_1_1, clean_start=False, username="acme/d1")
    assert (await handshake.authenticate(anonymous)).reason_code == RC.CLIENT_IDENTIFIER_NOT_VALID


async def test_a_client_id_longer_than_the_tables_hold_is_refused_before_authentication():
    """Issue 44: 255 characters is what every table holding a client id takes; a longer one
    failed the session store's and presence's batches, other tenants' writes with them."""
    handshake = Handshake(FakeConnection(make_broker()))
    longest = Connect("c" * 255, username="acme/d1", password=b"pw1", protocol_version=MQTT_5_0)
    assert isinstance(await handshake.authenticate(longest), AuthResult)
    longer = Connect("c" * 256, username="acme/d1", password=b"pw1", protocol_version=MQTT_5_0)
    assert await handshake.authenticate(longer) == Refusal(
        RC.CLIENT_IDENTIFIER_NOT_VALID, "client id too long"
    )


class Admitting:
    """An authenticator that lets everyone in as acme/d1 with the tenant's quota."""

    def __init__(self, quota: dict[str, int]) -> None:
        self.quota = quota

    async def authenticate(self, connect: Connect, peer: str) -> AuthResult:
        return AuthResult(0, "acme", "d1", quota=self.quota)


async def test_the_tenants_connection_limit_refuses_with_0x97_and_names_the_quota():
    broker = make_broker()
    broker.authenticator = Admitting({"max_connections": 1})
    handshake = Handshake(FakeConnection(broker))
    assert isinstance(await handshake.authenticate(_connect()), AuthResult)
    broker.accounts.connected("acme", "d2")  # one client of the tenant is in now
    assert await handshake.authenticate(_connect()) == Refusal(
        RC.QUOTA_EXCEEDED, "tenant connection limit reached", tenant="acme", quota="connections"
    )


async def test_welcome_caps_the_expiry_and_refuses_a_will_on_a_dollar_topic():
    handshake = Handshake(FakeConnection(make_broker()))
    result = AuthResult(0, "acme", "d1", quota={"max_session_expiry": 60})
    welcome = handshake.welcome(
        _connect(properties={"session_expiry_interval": 3600}), result, "c-d1"
    )
    assert welcome.expiry == 60 and welcome.will is None
    will = Will("$SYS/x", b"bye")
    refusal = handshake.welcome(_connect(will=will), result, "c-d1")
    assert refusal == Refusal(
        RC.NOT_AUTHORIZED, "will topic not authorized", tenant="acme", counts=("denied",)
    )


async def test_a_refusal_is_returned_as_connack_then_close_and_counted_for_its_tenant():
    broker = make_broker()
    conn = FakeConnection(broker)
    hooks = told(broker, "client.refused")
    refusal = Refusal(RC.QUOTA_EXCEEDED, "limit", tenant="acme", quota="connections")
    decided = Handshake(conn).refuse(refusal, _connect())
    assert not conn.written_now and not conn.closed  # nothing done through the connection
    connack, close = decided
    assert type(connack) is SendNow and close == Close()
    assert connack.data[0] == 0x20 and connack.data[3] == RC.QUOTA_EXCEEDED
    assert broker.stats["acme"].exceeded == {"connections": 1}
    assert [call[1:4] for call in hooks] == [("quota_exceeded", RC.QUOTA_EXCEEDED, "connections")]


async def test_claim_awaits_the_earlier_connections_connack_without_polling(monkeypatch):
    broker = make_broker()
    earlier = FakeConnection(broker)
    open_session(broker, earlier)
    later = FakeConnection(broker)

    async def no_polling(delay: float, *args) -> None:
        raise AssertionError(f"claim slept {delay}s instead of awaiting the CONNACK")

    monkeypatch.setattr(asyncio, "sleep", no_polling)
    loop = asyncio.get_running_loop()
    loop.call_later(0.05, earlier.answered.set_result, None)  # its CONNACK is written
    started = loop.time()
    await Handshake(later).claim(earlier.client_id, True)
    assert 0.04 <= loop.time() - started < 0.5


async def test_claim_stops_waiting_when_its_own_connection_ends():
    broker = make_broker()
    earlier = FakeConnection(broker)
    open_session(broker, earlier)
    later = FakeConnection(broker)
    loop = asyncio.get_running_loop()
    loop.call_later(0.02, later.close)
    started = loop.time()
    await Handshake(later).claim(earlier.client_id, True)
    assert loop.time() - started < CONNACK_WAIT / 4


async def test_claim_does_not_wait_for_an_answered_or_absent_connection():
    broker = make_broker()
    earlier = FakeConnection(broker)
    open_session(broker, earlier)
    earlier.answered.set_result(None)
    later = FakeConnection(broker)
    await asyncio.wait_for(Handshake(later).claim(earlier.client_id, True), 0.01)
    await asyncio.wait_for(Handshake(later).claim("nobody", True), 0.01)


async def test_auth_after_connack_without_a_method_is_a_protocol_error_returned():
    conn = FakeConnection(make_broker())
    decided = Handshake(conn).reauthenticate(Auth(RC.RE_AUTHENTICATE, {}))
    assert decided == Disconnect(
        RC.PROTOCOL_ERROR, "AUTH without an authentication method in CONNECT"
    )
    assert not conn.disconnected and not conn.sent

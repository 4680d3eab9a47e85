"""Enhanced authentication (MQTT 5.0 §4.12) with the built-in SCRAM-SHA-256 method: MQTT.js
drives the CONNECT exchange and a re-authentication; the protocol's edges go over a raw socket."""

from __future__ import annotations

import socket

from scramp import ScramClient

from common.mqtt.codec import Reader, encode
from common.mqtt.packets import MQTT_5_0, Auth, Connect, PacketType, Publish
from tests.broker.clients import run_mqtt_js

METHOD = "SCRAM-SHA-256"


def test_scram_connect_and_reauthentication_with_mqtt_js(broker):
    result = run_mqtt_js("scram.mjs", f"mqtt://127.0.0.1:{broker.port}", "acme/d1", "pw1")
    assert result == {
        "rounds": 2,  # one AUTH 0x18 to complete CONNECT, one for the re-authentication
        "connack": 0,
        "method": METHOD,
        "serverProved": True,  # CONNACK carried the server's proof: it knows the verifier
        "reauth": 0,  # AUTH 0x00 Success
        "reauthServerProved": True,
        "message": "scram/t after re-authentication",  # the connection went on afterwards
    }


def test_scram_with_a_wrong_secret_is_not_authorized(broker):
    result = run_mqtt_js("scram.mjs", f"mqtt://127.0.0.1:{broker.port}", "acme/d1", "nope")
    assert result["error"] == 0x87 and "connack" not in result


def test_failed_reauthentication_disconnects_with_not_authorized(broker):
    result = run_mqtt_js(
        "scram.mjs", f"mqtt://127.0.0.1:{broker.port}", "acme/d1", "pw1", "wrong-now"
    )
    assert result["connack"] == 0 and result["disconnect"] == 0x87
    assert "reauth" not in result and "message" not in result


# -- the protocol's edges, packet by packet ---------------------------------------------------


class Raw:
    def __init__(self, broker, **connect):
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
        self.reader = Reader(server_side=False, protocol_version=MQTT_5_0)
        self.packets: list = []
        self.send(Connect(protocol_version=MQTT_5_0, **connect))

    def send(self, packet) -> None:
        self.sock.sendall(encode(packet, MQTT_5_0))

    def next(self):
        """The next packet from the broker, or None once it closed the connection."""
        while not self.packets:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.packets.extend(self.reader.feed(chunk))
        return self.packets.pop(0)


def _scram_connect(broker, client_id: str, secret: str = "pw1") -> tuple[Raw, ScramClient]:
    scram = ScramClient([METHOD], "acme/d1", secret)
    first = scram.get_client_first().encode()
    raw = Raw(
        broker,
        client_id=client_id,
        username="acme/d1",
        properties={"authentication_method": METHOD, "authentication_data": first},
    )
    return raw, scram


def _finish(raw: Raw, scram: ScramClient, reason_code: int = 0x18):
    challenge = raw.next()
    assert challenge.type is PacketType.AUTH and challenge.reason_code == 0x18
    assert challenge.properties["authentication_method"] == METHOD  # [MQTT-4.12.0-5]
    scram.set_server_first(challenge.properties["authentication_data"].decode())
    final = scram.get_client_final().encode()
    props = {"authentication_method": METHOD, "authentication_data": final}
    raw.send(Auth(reason_code, props))
    return raw.next()


def test_scram_exchange_over_raw_packets(broker):
    raw, scram = _scram_connect(broker, "scram-raw")
    connack = _finish(raw, scram)
    assert connack.type is PacketType.CONNACK and connack.reason_code == 0
    assert connack.properties["authentication_method"] == METHOD
    scram.set_server_final(connack.properties["authentication_data"].decode())  # raises if forged
    raw.sock.close()


def test_packets_other_than_auth_before_connack_are_a_protocol_error(broker):
    raw, _ = _scram_connect(broker, "scram-early")
    assert raw.next().type is PacketType.AUTH
    raw.send(Publish("t", b"too early"))  # [MQTT-3.1.2-30]
    connack = raw.next()
    assert connack.type is PacketType.CONNACK and connack.reason_code == 0x82
    assert raw.next() is None


def test_auth_with_a_reason_other_than_continue_during_connect_is_a_protocol_error(broker):
    raw, scram = _scram_connect(broker, "scram-rc")
    connack = _finish(raw, scram, reason_code=0x19)  # the client must answer 0x18 [MQTT-4.12.0-3]
    assert connack.type is PacketType.CONNACK and connack.reason_code == 0x82


def test_auth_without_a_method_in_connect_is_a_protocol_error(broker):
    raw = Raw(broker, client_id="no-method", username="acme/d1", password=b"pw1")
    assert raw.next().reason_code == 0
    raw.send(Auth(0x19, {"authentication_method": METHOD}))  # [MQTT-4.12.0-7]
    disconnect = raw.next()
    assert disconnect.type is PacketType.DISCONNECT and disconnect.reason_code == 0x82
    assert raw.next() is None


def test_reauthentication_must_keep_the_method(broker):
    raw, scram = _scram_connect(broker, "scram-method")
    assert _finish(raw, scram).reason_code == 0
    raw.send(Auth(0x19, {"authentication_method": "SCRAM-SHA-1"}))  # [MQTT-4.12.1-1]
    disconnect = raw.next()
    assert disconnect.type is PacketType.DISCONNECT and disconnect.reason_code == 0x82


def test_reauthentication_with_the_wrong_user_is_refused(broker):
    raw, scram = _scram_connect(broker, "scram-user")
    assert _finish(raw, scram).reason_code == 0
    other = ScramClient([METHOD], "acme/d2", "pw2")  # valid secret, but not this connection's
    raw.send(
        Auth(
            0x19,
            {
                "authentication_method": METHOD,
                "authentication_data": other.get_client_first().encode(),
            },
        )
    )
    disconnect = raw.next()
    assert disconnect.type is PacketType.DISCONNECT and disconnect.reason_code == 0x87

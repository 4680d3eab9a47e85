"""Helpers for the Paho interoperability mirrors (test_paho_interop_311.py, test_paho_interop_5.py).

`Client` wraps the real paho-mqtt client (v2 callback API) the way the Paho suite's own test client
is used: connect/disconnect many times on one object, collect messages, SUBACKs and DISCONNECTs,
`kill()` (the suite's `terminate()`: the socket goes without a DISCONNECT) and `silence()` (its
`pause()`: no more reads, acknowledgements or pings). `Raw` speaks MQTT on a bare socket for the
few packets paho will not send (a second CONNECT, a wrong protocol name, withheld PUBRELs); it
borrows paho's property codec so the bytes are paho's, not the broker's.
"""

from __future__ import annotations

import json
import queue
import socket
import struct
import time
from dataclasses import dataclass
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

from tests.broker.clients import stop_loop
from tests.conformance.conftest import TENANTS, BrokerProcess, start_broker
from tests.mqtt_bytes import string, varint

HOST = "127.0.0.1"
# The tenants of tests/broker/conftest.py, with the Paho suite's ACL on `acme` (subscribing to
# "test/nosubscribe" is forbidden; every test here works under its own prefix, so the same rule
# stands for "{prefix}/nosubscribe"), plus a tenant whose quota caps keep-alives over 60 s
# (`kacap`: the suite's server keep alive of 60). The deny rule is in place for every test:
# wildcard subscriptions that overlap it (`#`, `+/+`, `{prefix}/#`) are granted and simply never
# carry the denied topic (Mosquitto's read semantics).
NOSUBSCRIBE_ACL = [
    {"action": "subscribe", "permission": "deny", "topic": "test/nosubscribe"},
    {"action": "subscribe", "permission": "deny", "topic": "+/nosubscribe"},
]
PAHO_TENANTS = {
    **TENANTS,
    "acme": {**TENANTS["acme"], "acl": NOSUBSCRIBE_ACL},
    "kacap": {
        "devices": {"d1": {"password": "pw1", "client_ids": "any"}},
        "quota": {"max_keepalive": 60},
    },
}
# Tenant `acme`: devices d1..d8 accept any client id.
USERS = {
    "a": ("acme/d1", "pw1"),
    "b": ("acme/d2", "pw2"),
    "kacap": ("kacap/d1", "pw1"),
}


def start_paho_broker(tmp: Any) -> BrokerProcess:
    """The conformance broker (`--sys-interval 1`) with PAHO_TENANTS: start_broker writes its own
    tenants file first on the command line, and argparse keeps the last `--auth-file`."""
    path = tmp / "paho-tenants.json"
    path.write_text(json.dumps({"tenants": PAHO_TENANTS}))
    return start_broker(tmp, "--sys-interval", "1", "--auth-file", str(path))


# The topic sets of the Paho suite; every test puts them under its own prefix (as client_test5
# does with "client_test5/") so that retained messages and sessions of one test never leak into
# another on the shared module broker.
TOPICS = ("TopicA", "TopicA/B", "Topic/C", "TopicA/C", "/TopicA")
WILDTOPICS = ("TopicA/+", "+/C", "#", "/#", "/+", "+/+", "TopicA/#")


def paho_fixtures(*, v5: bool) -> tuple:
    """The fixtures both Paho suites use, for one protocol version: a module broker, the
    per-test topic prefix and topics, and a factory of paho clients (closed at teardown).
    A suite binds them by name: `broker, prefix, topics, wildtopics, client = paho_fixtures(...)`."""

    @pytest.fixture(scope="module")
    def broker(tmp_path_factory):
        process = start_paho_broker(tmp_path_factory.mktemp("paho5" if v5 else "paho311"))
        yield process
        process.stop()

    @pytest.fixture
    def prefix(request) -> str:
        return request.node.name.removeprefix("test_") + "/"

    @pytest.fixture
    def topics(prefix) -> list[str]:
        return [prefix + t for t in TOPICS]

    @pytest.fixture
    def wildtopics(prefix) -> list[str]:
        return [prefix + t for t in WILDTOPICS]

    @pytest.fixture
    def client(broker, prefix):
        """Factory for paho clients with per-test client ids; all closed at teardown."""
        made: list[Client] = []

        def make(name: str = "myclientid", user: str = "a", **kwargs) -> Client:
            client_id = f"{prefix}{name}" if name else ""  # "": a zero-length client id
            made.append(Client(broker.port, client_id, v5=v5, user=user, **kwargs))
            return made[-1]

        yield make
        for c in made:
            c.close()

    return broker, prefix, topics, wildtopics, client


def props(packet_type: int, **values: Any) -> Properties:
    """paho Properties from keyword arguments (UserProperty takes a list of pairs)."""
    properties = Properties(packet_type)
    for name, value in values.items():
        if name == "UserProperty":
            for pair in value:
                properties.UserProperty = pair  # paho appends on each assignment
        else:
            setattr(properties, name, value)
    return properties


@dataclass
class Connack:
    reason_code: int
    session_present: bool
    properties: Any


@dataclass
class Disconnected:
    reason_code: int
    properties: Any


def _stop_loop(client: mqtt.Client) -> None:
    """`loop_stop()`, without waiting out the network thread's 1 s select: wake it the way paho
    does when a packet is queued (a byte on its socket pair), so that a silenced client stops at
    once rather than possibly sending one more PINGREQ."""
    client._thread_terminate = True
    if client._sockpairW is not None:
        try:
            client._sockpairW.send(b"0")
        except OSError:
            pass
    stop_loop(client)


class Client:
    """One client id, connected and reconnected like the Paho suite's `aclient`/`bclient`."""

    def __init__(
        self,
        port: int,
        client_id: str,
        *,
        v5: bool = True,
        user: str = "a",
        manual_ack: bool = False,
    ) -> None:
        self.port = port
        self.client_id = client_id
        self.v5 = v5
        self.username, self.password = USERS[user]
        self.manual_ack = manual_ack
        self.messages: queue.Queue = queue.Queue()
        self.disconnects: queue.Queue = queue.Queue()
        self._subacks: queue.Queue = queue.Queue()
        self._unsubacks: queue.Queue = queue.Queue()
        self._connack: queue.Queue = queue.Queue()
        self.acks: dict[int, tuple[int, Any]] = {}  # mid -> (PUBACK/PUBREC reason, properties)
        self.client: mqtt.Client | None = None

    # -- connection -----------------------------------------------------------------------

    def connect(
        self,
        *,
        clean: bool = True,
        keepalive: int = 60,
        properties: dict | None = None,
        will: tuple | None = None,
        will_properties: dict | None = None,
        expect_success: bool = True,
        timeout: float = 5.0,
    ) -> Connack:
        """A fresh paho client on a new socket; returns the CONNACK."""
        self._drop_client()
        self.disconnects = queue.Queue()  # only this connection's end counts
        protocol = mqtt.MQTTv5 if self.v5 else mqtt.MQTTv311
        kwargs = {} if self.v5 else {"clean_session": clean}
        client = mqtt.Client(
            CallbackAPIVersion.VERSION2,
            client_id=self.client_id,
            protocol=protocol,
            manual_ack=self.manual_ack,
            **kwargs,
        )
        client.username_pw_set(self.username, self.password)
        client.on_connect = self._on_connect
        client.on_message = lambda c, u, m: self.messages.put(m)
        client.on_subscribe = lambda c, u, mid, codes, p: self._subacks.put(codes)
        client.on_unsubscribe = lambda c, u, mid, codes, p: self._unsubacks.put(codes)
        client.on_disconnect = self._on_disconnect
        client.on_publish = self._on_publish
        if will is not None:
            will_props = (
                props(PacketTypes.WILLMESSAGE, **will_properties) if will_properties else None
            )
            client.will_set(*will, properties=will_props)  # (topic, payload[, qos[, retain]])
        connect_props = None
        if self.v5:
            connect_props = props(PacketTypes.CONNECT, **(properties or {}))
        self.client = client
        connect_kwargs = {"clean_start": clean, "properties": connect_props} if self.v5 else {}
        client.connect(HOST, self.port, keepalive=keepalive, **connect_kwargs)
        client.loop_start()
        try:
            connack = self._connack.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"{self.client_id}: no CONNACK") from None
        if expect_success:
            assert connack.reason_code == 0, f"{self.client_id}: CONNACK {connack.reason_code}"
        return connack

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        self._connack.put(Connack(reason_code.value, flags.session_present, properties))

    def _on_publish(self, client, userdata, mid, reason_code, properties) -> None:
        self.acks[mid] = (reason_code.value, properties)

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        self.disconnects.put(Disconnected(reason_code.value, properties))

    def disconnect(self, reason_code: int = 0, properties: dict | None = None) -> None:
        """A normal DISCONNECT, then wait until paho has closed the socket."""
        client = self.client
        if client is None:
            return
        if self.v5:
            from paho.mqtt.reasoncodes import ReasonCode

            rc = ReasonCode(PacketTypes.DISCONNECT, identifier=reason_code)
            disconnect_props = props(PacketTypes.DISCONNECT, **properties) if properties else None
            client.disconnect(rc, disconnect_props)
        else:
            client.disconnect()
        self._wait_closed()
        stop_loop(client)
        self.client = None

    def kill(self) -> None:
        """The Paho suite's `terminate()`: the network connection just goes (no DISCONNECT)."""
        client = self.client
        if client is None:
            return
        _stop_loop(client)
        sock = client.socket()
        if sock is not None:
            sock.close()
        self.client = None

    def silence(self) -> None:
        """The Paho suite's `pause()`: the socket stays open but nothing more is read or sent
        (no acknowledgements, no PINGREQ)."""
        assert self.client is not None
        _stop_loop(self.client)

    def steal_socket(self) -> Raw:
        """After `silence()`: the connection's socket, to read what the broker sends on it."""
        assert self.client is not None
        sock = self.client.socket()
        self._stolen = self.client  # paho closes its socket when the client is collected
        self.client = None
        raw = Raw.__new__(Raw)
        raw.sock, raw._buffer = sock, b""
        sock.setblocking(True)
        return raw

    def _wait_closed(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while self.client is not None and self.client.is_connected():
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.client_id}: still connected")
            time.sleep(0.01)

    def _drop_client(self) -> None:
        if self.client is not None:
            self.kill()

    def close(self) -> None:
        """Test teardown: end whatever connection is left, quietly."""
        client = self.client
        if client is None:
            return
        try:
            if client.is_connected():
                self.disconnect()
            else:
                self.kill()
        except Exception:
            self.kill()

    def wait_disconnect(self, timeout: float = 5.0) -> Disconnected | None:
        try:
            return self.disconnects.get(timeout=timeout)
        except queue.Empty:
            return None

    # -- operations ------------------------------------------------------------------------

    def subscribe(
        self,
        topics: str | list[str],
        qos: int | list[int] = 2,
        *,
        subscription_id: int | None = None,
        **options: Any,
    ) -> list[int]:
        """SUBSCRIBE and wait for the SUBACK; returns its reason codes / granted QoS."""
        assert self.client is not None
        names = [topics] if isinstance(topics, str) else topics
        levels = [qos] * len(names) if isinstance(qos, int) else qos
        sub_props = None
        if self.v5:
            entries = [
                (name, SubscribeOptions(qos=level, **options))
                for name, level in zip(names, levels, strict=True)
            ]
            if subscription_id is not None:
                sub_props = props(PacketTypes.SUBSCRIBE, SubscriptionIdentifier=subscription_id)
        else:
            entries = list(zip(names, levels, strict=True))
        result, _ = self.client.subscribe(entries, properties=sub_props)
        assert result == mqtt.MQTT_ERR_SUCCESS, result
        try:
            codes = self._subacks.get(timeout=5)
        except queue.Empty:
            raise AssertionError(f"{self.client_id}: no SUBACK") from None
        return [code.value for code in codes]

    def unsubscribe(self, topics: str | list[str]) -> list[int]:
        assert self.client is not None
        self.client.unsubscribe(topics)
        try:
            codes = self._unsubacks.get(timeout=5)
        except queue.Empty:
            raise AssertionError(f"{self.client_id}: no UNSUBACK") from None
        return [code.value for code in codes] if isinstance(codes, list) else []

    def publish(
        self,
        topic: str,
        payload: bytes | str = b"",
        qos: int = 0,
        retain: bool = False,
        properties: dict | None = None,
        *,
        wait: bool = True,
    ) -> mqtt.MQTTMessageInfo:
        """PUBLISH; with `wait`, return once the QoS 1/2 flow has completed."""
        assert self.client is not None
        publish_props = props(PacketTypes.PUBLISH, **properties) if properties else None
        info = self.client.publish(topic, payload, qos, retain, properties=publish_props)
        if qos and wait:
            info.wait_for_publish(5)
            assert info.is_published(), f"{self.client_id}: QoS {qos} publish not completed"
        return info

    def ack(self, message: mqtt.MQTTMessage) -> None:
        assert self.client is not None
        self.client.ack(message.mid, message.qos)

    # -- what arrived ----------------------------------------------------------------------

    def expect(self, count: int, timeout: float = 5.0) -> list[mqtt.MQTTMessage]:
        """Up to `count` messages, waiting at most `timeout` for them."""
        out: list[mqtt.MQTTMessage] = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                out.append(self.messages.get(timeout=remaining))
            except queue.Empty:
                break
        return out

    def drain(self, quiet: float = 0.3) -> list[mqtt.MQTTMessage]:
        """Everything that arrives until nothing has for `quiet` seconds."""
        out: list[mqtt.MQTTMessage] = []
        while True:
            try:
                out.append(self.messages.get(timeout=quiet))
            except queue.Empty:
                return out


# -- raw MQTT on a socket ----------------------------------------------------------------------


def frame(first: int, body: bytes) -> bytes:
    return bytes((first,)) + varint(len(body)) + body


def fixed_header(first: int, remaining_length: int) -> bytes:
    return bytes((first,)) + varint(remaining_length)


def connect_packet(
    client_id: str,
    user: str = "a",
    *,
    v5: bool = False,
    clean: bool = True,
    keepalive: int = 60,
    protocol_name: str = "MQTT",
    properties: dict | None = None,
) -> bytes:
    username, password = USERS[user]
    flags = 0xC0 | (0x02 if clean else 0)
    body = string(protocol_name) + bytes((5 if v5 else 4, flags)) + struct.pack("!H", keepalive)
    if v5:
        body += props(PacketTypes.CONNECT, **(properties or {})).pack()
    body += string(client_id) + string(username) + string(password)
    return frame(0x10, body)


def subscribe_packet(packet_id: int, topic_filter: str, qos: int, *, v5: bool = False) -> bytes:
    body = struct.pack("!H", packet_id) + (b"\x00" if v5 else b"")
    return frame(0x82, body + string(topic_filter) + bytes((qos,)))


def publish_packet(
    topic: str,
    payload: bytes,
    qos: int = 0,
    packet_id: int = 0,
    *,
    v5: bool = False,
    properties: bytes = b"\x00",
) -> bytes:
    """`properties` is a 5.0 property block as sent (paho's `Properties.pack()` refuses some
    values a test must send, such as topic alias 0)."""
    body = string(topic) + (struct.pack("!H", packet_id) if qos else b"")
    body += (properties if v5 else b"") + payload
    return frame(0x30 | (qos << 1), body)


def ack_packet(kind: int, packet_id: int) -> bytes:
    """PUBACK (4), PUBREC (5), PUBREL (6) or PUBCOMP (7), reason Success."""
    return frame((kind << 4) | (0x02 if kind == 6 else 0), struct.pack("!H", packet_id))


@dataclass
class RawPacket:
    kind: int  # the packet type, 1..15
    flags: int
    body: bytes

    @property
    def packet_id(self) -> int:
        if self.kind == 3:  # PUBLISH: after the topic
            (length,) = struct.unpack_from("!H", self.body, 0)
            return struct.unpack_from("!H", self.body, 2 + length)[0]
        return struct.unpack_from("!H", self.body, 0)[0]

    @property
    def qos(self) -> int:
        return (self.flags >> 1) & 0x03


class Raw:
    """A bare TCP connection to the broker that reads whole packets."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection((HOST, port), timeout=5)
        self._buffer = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, size: int, deadline: float) -> bool:
        while len(self._buffer) < size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)
            chunk = self.sock.recv(65536)
            if not chunk:
                return False
            self._buffer += chunk
        return True

    def read(self, timeout: float = 5.0) -> RawPacket | None:
        """The next packet; None when the broker closed the connection; TimeoutError if
        nothing came within `timeout`."""
        deadline = time.monotonic() + timeout
        try:
            if not self._fill(2, deadline):
                return None
            length, shift, index = 0, 0, 1
            while True:
                if not self._fill(index + 1, deadline):
                    return None
                byte = self._buffer[index]
                length |= (byte & 0x7F) << shift
                index += 1
                if not byte & 0x80:
                    break
                shift += 7
            if not self._fill(index + length, deadline):
                return None
        except ConnectionResetError:
            return None
        first = self._buffer[0]
        body = self._buffer[index : index + length]
        self._buffer = self._buffer[index + length :]
        return RawPacket(first >> 4, first & 0x0F, body)

    def closed_by_broker(self, timeout: float = 5.0) -> bool:
        """True once the broker closes the connection (packets before that are skipped)."""
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if self.read(deadline - time.monotonic()) is None:
                    return True
        except TimeoutError:
            return False
        return False

    def close(self) -> None:
        self.sock.close()


def connack_properties(packet: RawPacket) -> Properties:
    """The properties of a 5.0 CONNACK read by `Raw`."""
    properties = Properties(PacketTypes.CONNACK)
    properties.unpack(packet.body[2:])
    return properties

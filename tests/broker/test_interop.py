"""Other real clients and transports: aiomqtt, amqtt, mosquitto_pub/sub, WebSocket, TLS, raw
malformed packets, keep-alive, metrics and graceful shutdown."""

import asyncio
import socket
import ssl
import subprocess
import time
import urllib.request

import aiomqtt
import pytest

from common.mqtt.codec import encode
from common.mqtt.packets import Connect, Publish
from tests.broker.clients import Paho, run_mqtt_js
from tests.broker.conftest import start_broker


@pytest.mark.parametrize("version", [aiomqtt.ProtocolVersion.V311, aiomqtt.ProtocolVersion.V5])
async def test_aiomqtt_round_trip(broker, version):
    async with aiomqtt.Client(
        "127.0.0.1",
        broker.port,
        username="acme/d1",
        password="pw1",
        identifier=f"aio-sub-{version.value}",
        protocol=version,
    ) as sub:
        await sub.subscribe("aio/#", qos=2)
        async with aiomqtt.Client(
            "127.0.0.1",
            broker.port,
            username="acme/d2",
            password="pw2",
            identifier=f"aio-pub-{version.value}",
            protocol=version,
        ) as pub:
            for qos in (0, 1, 2):
                await pub.publish(f"aio/{qos}", f"q{qos}".encode(), qos=qos)
        got = []
        async with asyncio.timeout(5):
            async for message in sub.messages:
                got.append((str(message.topic), message.payload, message.qos))
                if len(got) == 3:
                    break
    assert got == [("aio/0", b"q0", 0), ("aio/1", b"q1", 1), ("aio/2", b"q2", 2)]


async def test_aiomqtt_wrong_password_is_refused(broker):
    with pytest.raises(aiomqtt.MqttError):
        async with aiomqtt.Client(
            "127.0.0.1",
            broker.port,
            username="acme/d1",
            password="bad",
            identifier="aio-bad",
            protocol=aiomqtt.ProtocolVersion.V5,
        ):
            pass


async def test_amqtt_client(broker):
    from amqtt.client import MQTTClient

    sub = MQTTClient(client_id="amqtt-sub")
    pub = MQTTClient(client_id="amqtt-pub")
    await sub.connect(f"mqtt://acme%2Fd1:pw1@127.0.0.1:{broker.port}/")
    await sub.subscribe([("amqtt/t", 1)])
    await pub.connect(f"mqtt://acme%2Fd2:pw2@127.0.0.1:{broker.port}/")
    await pub.publish("amqtt/t", b"from amqtt", qos=1)
    message = await asyncio.wait_for(sub.deliver_message(), 5)
    assert message.publish_packet.payload.data == b"from amqtt"
    await pub.disconnect()
    await sub.disconnect()


@pytest.mark.parametrize("version", ["mqttv311", "mqttv5"])
def test_mosquitto_clients(broker, version):
    sub = subprocess.Popen(
        [
            "mosquitto_sub",
            "-h",
            "127.0.0.1",
            "-p",
            str(broker.port),
            "-u",
            "acme/d1",
            "-P",
            "pw1",
            "-i",
            f"mosq-sub-{version}",
            "-V",
            version,
            "-t",
            "mosq/#",
            "-q",
            "2",
            "-C",
            "3",
            "-W",
            "10",
            "-v",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.5)
    for qos in (0, 1, 2):
        subprocess.run(
            [
                "mosquitto_pub",
                "-h",
                "127.0.0.1",
                "-p",
                str(broker.port),
                "-u",
                "acme/d2",
                "-P",
                "pw2",
                "-i",
                f"mosq-pub-{version}-{qos}",
                "-V",
                version,
                "-t",
                f"mosq/{qos}",
                "-m",
                f"m{qos}",
                "-q",
                str(qos),
            ],
            check=True,
            timeout=10,
        )
    out, _ = sub.communicate(timeout=15)
    assert out.split("\n")[:3] == ["mosq/0 m0", "mosq/1 m1", "mosq/2 m2"]


def test_mosquitto_pub_exit_codes_carry_connack(broker):
    def pub(*args):
        return subprocess.run(
            [
                "mosquitto_pub",
                "-h",
                "127.0.0.1",
                "-p",
                str(broker.port),
                "-t",
                "x",
                "-m",
                "x",
                *args,
            ],
            capture_output=True,
            timeout=10,
        ).returncode

    assert pub("-u", "acme/d1", "-P", "nope", "-V", "mqttv311") == 4  # bad user name/password
    assert pub("-u", "acme/d1", "-P", "nope", "-V", "mqttv5") == 134
    assert pub("-u", "acme/exact", "-P", "pw-exact", "-i", "x", "-V", "mqttv311") == 2


def test_websocket_with_paho(broker):
    sub = Paho(broker.ws_port, "acme/d1", "pw1", "ws-sub", transport="websockets")
    sub.subscribe("ws/#", 1)
    pub = Paho(broker.port, "acme/d2", "pw2", "ws-pub")
    pub.publish("ws/t", b"x" * 70000, 1)  # spans many frames
    (message,) = sub.expect(1)
    assert message.payload == b"x" * 70000
    sub.close(), pub.close()


def test_websocket_wrong_path_is_rejected(broker):
    with socket.create_connection(("127.0.0.1", broker.ws_port), timeout=5) as sock:
        sock.sendall(
            b"GET /other HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade"
            b"\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13"
            b"\r\n\r\n"
        )
        assert b" 404 " in sock.recv(1024)


def test_websocket_connect_sent_with_the_upgrade_request_is_answered(broker):
    """A client that does not wait for the 101 (its CONNECT frame in the same write as the
    upgrade request) gets its CONNACK: the frame after the request is read, not dropped."""
    connect = encode(Connect(client_id="eager", username="acme/d1", password=b"pw1"), 4)
    mask = b"\x01\x02\x03\x04"
    masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(connect))
    frame = bytes([0x82, 0x80 | len(connect)]) + mask + masked  # binary, masked (< 126 bytes)
    with socket.create_connection(("127.0.0.1", broker.ws_port), timeout=5) as sock:
        sock.sendall(
            b"GET /mqtt HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade"
            b"\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13"
            b"\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n" + frame
        )
        answer, deadline = b"", time.monotonic() + 5
        while b"\r\n\r\n" not in answer or len(answer.split(b"\r\n\r\n", 1)[1]) < 6:
            assert time.monotonic() < deadline, answer
            answer += sock.recv(4096)
        head, body = answer.split(b"\r\n\r\n", 1)
        assert b" 101 " in head
        assert body[0] == 0x82 and body[2] >> 4 == 2  # a binary frame holding a CONNACK
        assert body[2 + 3] == 0  # accepted


@pytest.fixture(scope="module")
def tls_broker(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("tls")
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    process = start_broker(
        tmp, "--tls-port", "0", "--wss-port", "0", "--tls-cert", str(cert), "--tls-key", str(key)
    )
    yield process, cert
    process.stop()


def test_tls_and_secure_websocket(tls_broker):
    process, cert = tls_broker
    tls = {"ca_certs": str(cert)}
    sub = Paho(process.listeners["mqtts"][1], "acme/d1", "pw1", "tls-sub", tls=tls)
    sub.subscribe("tls/#", 1)
    pub = Paho(
        process.listeners["wss"][1], "acme/d2", "pw2", "wss-pub", tls=tls, transport="websockets"
    )
    pub.publish("tls/t", "secret", 1)
    assert sub.expect(1)[0].payload == b"secret"
    sub.close(), pub.close()
    context = ssl.create_default_context()
    with pytest.raises(ssl.SSLError):  # an untrusted certificate is refused by a strict client
        with socket.create_connection(process.listeners["mqtts"], timeout=5) as raw:
            context.wrap_socket(raw, server_hostname="127.0.0.1")


def _connect_packet(
    client_id: str, username: str, password: str, version: int = 4, keep_alive: int = 60
) -> bytes:
    def s(text: str) -> bytes:
        raw = text.encode()
        return len(raw).to_bytes(2, "big") + raw

    body = s("MQTT") + bytes((version, 0xC2)) + keep_alive.to_bytes(2, "big")
    if version == 5:
        body += b"\x00"
    body += s(client_id) + s(username) + s(password)
    return bytes((0x10, len(body))) + body


def _raw_client(broker, client_id: str, version: int = 4, keep_alive: int = 60):
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    sock.sendall(_connect_packet(client_id, "acme/d1", "pw1", version, keep_alive))
    connack = sock.recv(64)
    assert connack[0] == 0x20 and connack[3 if version == 4 else 3] == 0
    return sock


def _closed(sock: socket.socket, timeout: float = 5) -> bytes:
    """Read until the server closes; returns what it sent."""
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(4096)
        except (ConnectionResetError, TimeoutError):
            return data
        if not chunk:
            return data
        data += chunk


@pytest.mark.parametrize(
    "packet, reason",
    [
        (b"\x36\x07\x00\x01a\x00\x01\x00\x00", 0x81),  # PUBLISH with QoS 3
        (b"\x82\x03\x00\x01\x00", 0x82),  # SUBSCRIBE without filters
        (b"\x32\x06\x00\x01a\x00\x00\x00", 0x82),  # packet identifier 0 (v5: props follow)
        (b"\x30\x05\x00\x02a+\x00", 0x90),  # wildcard in a topic name
        (b"\x30\x05\x00\x02\xff\xfe\x00", 0x81),  # topic is not UTF-8
        (b"\x83\x06\x00\x01\x00\x01a\x00", 0x81),  # SUBSCRIBE reserved flags wrong
        (b"\x10\x00", 0x82),  # a second CONNECT
    ],
)
def test_malformed_packets_close_only_that_connection(broker, packet, reason):
    bystander = Paho(broker.port, "acme/d2", "pw2", "bystander")
    bystander.subscribe("alive/#", 1)
    sock = _raw_client(broker, "raw-bad", version=5)
    sock.sendall(packet)
    sent = _closed(sock)
    assert sent[:1] == b"\xe0" and sent[2] == reason, sent  # DISCONNECT with the reason code
    sock.close()
    bystander.publish("alive/x", "still here", 1)
    assert bystander.expect(1)[0].payload == b"still here"
    bystander.close()


def test_a_connect_and_300_publishes_in_one_write_are_all_answered_in_order(broker):
    """A client that pipelines: CONNECT and 300 QoS 1 PUBLISHes in one write (the packets read
    with the CONNECT wait while it is judged, and those of a read the broker handles a slice at
    a time, `flow.ReadGate.read_slice`, wait in the reader: all must follow, in order, without
    more bytes from the client)."""
    sub = Paho(broker.port, "acme/d2", "pw2", "pipe-sub")
    sub.subscribe("pipe/#", 1)
    burst = encode(Connect("pipe-pub", 4, username="acme/d1", password=b"pw1"), 4) + b"".join(
        encode(Publish(f"pipe/{i}", f"m{i}".encode(), 1, packet_id=i + 1), 4) for i in range(300)
    )
    sock = socket.create_connection(("127.0.0.1", broker.port), timeout=5)
    sock.sendall(burst)
    expected = b"\x20\x02\x00\x00" + b"".join(
        b"\x40\x02" + (i + 1).to_bytes(2, "big") for i in range(300)
    )
    got = b""
    deadline = time.monotonic() + 10
    while len(got) < len(expected) and time.monotonic() < deadline:
        got += sock.recv(65536)
    assert got == expected  # CONNACK, then every PUBACK in order
    assert [m.payload for m in sub.expect(300, 10)] == [f"m{i}".encode() for i in range(300)]
    sock.close(), sub.close()


def test_v311_protocol_violation_just_closes(broker):
    sock = _raw_client(broker, "raw-v3")
    sock.sendall(b"\x36\x07\x00\x01a\x00\x01\x00\x00")
    assert _closed(sock) == b""
    sock.close()


def test_first_packet_must_be_connect_and_unknown_version_refused(broker):
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        sock.sendall(b"\xc0\x00")  # PINGREQ before CONNECT
        assert _closed(sock) == b""
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as sock:
        sock.sendall(_connect_packet("v9", "acme/d1", "pw1", version=9))
        assert _closed(sock) == b"\x20\x02\x00\x01"  # unacceptable protocol version


def test_keep_alive_timeout_closes_silent_client(broker):
    sock = _raw_client(broker, "sleepy", keep_alive=1)
    started = time.monotonic()
    _closed(sock, timeout=5)
    assert 1.4 <= time.monotonic() - started <= 3.5  # 1.5 x keep alive
    sock.close()


def test_metrics_and_graceful_shutdown(tmp_path):
    process = start_broker(tmp_path, "--metrics-port", "0")
    client = Paho(process.port, "acme/d1", "pw1", "metrics", v5=True)
    client.subscribe("m/#", 0)
    client.publish("m/x", "1", 0)
    client.expect(1)
    host, port = process.listeners["metrics"]
    text = urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=5).read().decode()
    assert 'mqtt_clients_connected{tenant="acme"} 1.0' in text
    assert 'mqtt_messages_received_total{tenant="acme"} 1.0' in text
    assert process.stop() == 0  # SIGTERM: clean exit
    assert client.disconnected.wait(5)
    assert client.disconnect_reason.value == 0x8B  # server shutting down
    client.stop_loop()


def test_mqtt_js_over_websocket(broker):
    url = f"ws://127.0.0.1:{broker.ws_port}/mqtt"
    received = run_mqtt_js("roundtrip.mjs", url, "acme/d1", "pw1")
    assert received == {
        "topic": "js/t",
        "payload": "from mqtt.js",
        "qos": 1,
        "userProperties": {"a": "1"},
    }

"""Each quota dimension enforced on real clients against a broker reading the control plane, and
each refusal counted in the tenant's own `$SYS`."""

import socket
import time

import pytest

from common.mqtt.codec import Reader, encode
from common.mqtt.packets import MQTT_5_0, Connect, Disconnect, PubAck, Publish
from data_plane.broker.limits import PUBLISH_OVERHEAD
from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.tenancy.test_broker_tenancy import running_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pg_broker():
    with running_pg_broker("--no-archive", "--sys-interval", "0.3") as port:
        yield port


@pytest.fixture
def acme():
    tenant = tenant_services.tenant_create("acme")
    _, secret = device_services.device_create(tenant=tenant, name="d", client_id_policy="any")
    return tenant, secret


def limit(tenant, **quota) -> None:
    tenant_services.tenant_set_quota(tenant, quota)
    time.sleep(0.5)  # NOTIFY → the broker's policy cache


def sys_figure(port: int, secret: str, name: str) -> str:
    watcher = Paho(port, "acme/d", secret, f"sys-{name.replace('/', '-')}")
    watcher.subscribe(f"$SYS/broker/{name}", 0)
    got = watcher.expect(1, 3)
    watcher.close()
    return got[0].payload.decode() if got else ""


def raw_v5(port: int, secret: str, client_id: str) -> tuple[socket.socket, Reader]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(
        encode(Connect(client_id, MQTT_5_0, username="acme/d", password=secret.encode()), 5)
    )
    reader = Reader(server_side=False, protocol_version=MQTT_5_0)
    (connack,) = reader.feed(sock.recv(1024))
    assert connack.reason_code == 0
    return sock, reader


def read_all(sock: socket.socket, reader: Reader, wait: float = 0.5) -> list:
    packets, deadline = [], time.monotonic() + wait
    sock.settimeout(0.1)
    while time.monotonic() < deadline:
        try:
            data = sock.recv(65536)
        except TimeoutError:
            continue
        if not data:
            break
        packets += reader.feed(data)
    return packets


def test_message_size_quota(pg_broker, acme):
    tenant, secret = acme
    limit(tenant, max_message_size=100)
    watcher = Paho(pg_broker, "acme/d", secret, "size-watch")
    watcher.subscribe("size/#", 1)
    sock, reader = raw_v5(pg_broker, secret, "size-v5")
    sock.sendall(encode(Publish("size/t", b"x" * 101, 1, packet_id=1), MQTT_5_0))
    (disconnect,) = read_all(sock, reader)
    sock.close()
    assert isinstance(disconnect, Disconnect) and disconnect.reason_code == 0x95
    assert "max_message_size of 100 bytes" in disconnect.properties["reason_string"]
    fits = Paho(pg_broker, "acme/d", secret, "size-fits", v5=False)
    fits.publish("size/t", b"fits", 1)
    assert [m.payload for m in watcher.expect(2, 2)] == [b"fits"]
    assert sys_figure(pg_broker, secret, "quota/exceeded/message_size") == "1"
    # 3.1.1: tests/tenancy/test_pressure.py (closed, never acknowledged).


def test_message_size_changed_while_connected(pg_broker, acme):
    # CONNACK told the client the size of its day; a quota changed later is enforced on the
    # payload as before, and the next connection is told the new size.
    tenant, secret = acme
    limit(tenant, max_message_size=1000)
    watcher = Paho(pg_broker, "acme/d", secret, "size-change-watch")
    watcher.subscribe("grow/#", 1)
    client = Paho(pg_broker, "acme/d", secret, "size-change")
    assert client.connack_properties.MaximumPacketSize == 1000 + PUBLISH_OVERHEAD
    limit(tenant, max_message_size=5000)  # raised: the connection takes the larger at once
    client.publish("grow/t", b"x" * 3000, 1)
    assert [len(m.payload) for m in watcher.expect(1, 3)] == [3000]
    limit(tenant, max_message_size=100)  # lowered: over it, 0x95 with the limit in words
    client.publish("grow/t", b"x" * 500, 1)
    assert client.disconnected.wait(3) and client.disconnect_reason.value == 0x95
    assert "max_message_size of 100 bytes" in client.disconnect_properties.ReasonString
    client.stop_loop()
    again = Paho(pg_broker, "acme/d", secret, "size-change")
    assert again.connack_properties.MaximumPacketSize == 100 + PUBLISH_OVERHEAD
    again.publish("grow/t", b"fits", 1)
    assert [m.payload for m in watcher.expect(1, 3)] == [b"fits"]
    again.close(), watcher.close()


def test_subscription_quota(pg_broker, acme):
    tenant, secret = acme
    limit(tenant, max_subscriptions_per_client=2)
    client = Paho(pg_broker, "acme/d", secret, "subs-v5")
    assert [client.subscribe(f"s/{i}", 1)[0].value for i in range(3)] == [1, 1, 0x97]
    assert client.subscribe("s/0", 0)[0].value == 0  # re-subscribing an existing one is fine
    old = Paho(pg_broker, "acme/d", secret, "subs-311", v5=False)
    assert [old.subscribe(f"s/{i}", 1)[0] for i in range(3)] == [1, 1, 0x80]


def test_retained_quota(pg_broker, acme):
    tenant, secret = acme
    limit(tenant, max_retained_messages=1)
    sock, reader = raw_v5(pg_broker, secret, "retainer")
    for packet_id, topic in ((1, "r/a"), (2, "r/b"), (3, "r/a")):
        publish = Publish(topic, b"v", 1, retain=True, packet_id=packet_id)
        sock.sendall(encode(publish, MQTT_5_0))
    acks = [p for p in read_all(sock, reader) if isinstance(p, PubAck)]
    sock.close()
    # The second topic is refused; replacing the one already kept is not.
    assert [(a.packet_id, a.reason_code) for a in acks] == [(1, 0x10), (2, 0x97), (3, 0x10)]
    assert acks[1].properties["reason_string"] == "retained message limit"


def test_keepalive_quota(pg_broker, acme):
    tenant, secret = acme
    limit(tenant, max_keepalive=10)
    client = Paho(pg_broker, "acme/d", secret, "ka", keepalive=60)
    assert client.connack_properties.ServerKeepAlive == 10


def test_connection_quota_counts_in_sys(pg_broker, acme):
    tenant, secret = acme
    limit(tenant, max_connections=2)
    first = Paho(pg_broker, "acme/d", secret, "c1")
    assert Paho(pg_broker, "acme/d", secret, "c2").reason_code == 0
    assert Paho(pg_broker, "acme/d", secret, "c3").reason_code == 0x97
    first.close()
    assert sys_figure(pg_broker, secret, "quota/exceeded/connections") == "1"


def test_queued_messages_quota(pg_broker, acme):
    tenant, secret = acme
    limit(tenant, max_queued_messages=5)
    sub = Paho(pg_broker, "acme/d", secret, "queue-sub", clean=False, expiry=600)
    sub.subscribe("q/#", 1)
    sub.close()
    pub = Paho(pg_broker, "acme/d", secret, "queue-pub")
    for i in range(12):
        pub.publish("q/t", f"m{i}", 1)
    back = Paho(pg_broker, "acme/d", secret, "queue-sub", clean=False, expiry=600)
    assert [m.payload.decode() for m in back.expect(12, 2)] == [f"m{i}" for i in range(5)]


def test_inbound_bytes_rate_slows_the_publisher(pg_broker, acme):
    tenant, secret = acme
    limit(tenant, max_inbound_bytes_rate=2000)
    sock, reader = raw_v5(pg_broker, secret, "bytes")
    started = time.monotonic()
    for packet_id in range(1, 7):
        sock.sendall(encode(Publish("b/t", b"x" * 1000, 1, packet_id=packet_id), MQTT_5_0))
    acks = [p.reason_code for p in read_all(sock, reader, 4) if isinstance(p, PubAck)]
    took = time.monotonic() - started
    sock.close()
    assert acks == [0x10] * 6  # every one taken (no subscriber): slowed, none refused
    assert took >= 1.8  # one second's burst (2 kB), then 4 kB at 2 kB/s
    assert sys_figure(pg_broker, secret, "quota/throttled/inbound_bytes_rate") != ""


def test_publish_rate_on_3_1_1_slows_the_reader(pg_broker, acme):
    tenant, secret = acme
    limit(tenant, max_publish_rate=10)
    client = Paho(pg_broker, "acme/d", secret, "slow-311", v5=False)
    started = time.monotonic()
    infos = [client.client.publish("slow/t", b"x", 1) for _ in range(30)]
    for info in infos:
        info.wait_for_publish(10)
    elapsed = time.monotonic() - started
    assert all(i.is_published() for i in infos)  # nothing refused, only slowed
    # 10 in the first second's burst, the other 20 at 10/s.
    assert elapsed >= 1.7


def test_outbound_bytes_rate_paces_deliveries(pg_broker, acme):
    tenant, secret = acme
    limit(tenant, max_outbound_bytes_rate=10_000, max_publish_rate=1000)
    sub = Paho(pg_broker, "acme/d", secret, "paced-sub")
    sub.subscribe("o/#", 1)
    pub = Paho(pg_broker, "acme/d", secret, "paced-pub")
    started = time.monotonic()
    for i in range(30):
        pub.publish("o/t", f"{i:04d}".encode() * 250, 1)  # 1,000 bytes each, all acknowledged
    published = time.monotonic() - started
    got = sub.expect(30, 10)
    took = time.monotonic() - started
    # 30 kB at 10 kB/s after a one-second burst: about 2 s, none lost, in order.
    assert [m.payload[:4] for m in got] == [f"{i:04d}".encode() for i in range(30)]
    assert took >= 1.7, f"delivered 30 kB in {took:.2f}s"
    assert published < 1.5  # the publisher was not held back: the subscriber's queue was
    assert int(sys_figure(pg_broker, secret, "quota/throttled/outbound_rate")) >= 1
    # Raising the quota applies to the live connection.
    limit(tenant, max_outbound_bytes_rate=10_000_000, max_publish_rate=1000)
    started = time.monotonic()
    for _ in range(30):
        pub.publish("o/t", b"x" * 1000, 1)
    assert len(sub.expect(30, 5)) == 30
    assert time.monotonic() - started < 1.5
    sub.close(), pub.close()

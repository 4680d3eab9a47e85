"""Back-pressure over real sockets: a subscriber whose queue backs up stops the broker reading its
publisher (no more PUBACKs) until it drains, so nothing is dropped; a subscriber that never
drains holds the publisher only for the read gate's allowance.

The broker runs in the test's loop (to shorten or lengthen that allowance); the clients are paho
in their own threads. The subscriber allows one message in flight (Receive Maximum 1) and
acknowledges by hand, so its session's queue is the backlog.
"""

from __future__ import annotations

import asyncio
import queue
import socket
import time

from common.mqtt.codec import Reader, encode
from common.mqtt.packets import MQTT_5_0, Connect, PacketType, Subscribe, Subscription
from data_plane.broker.flow import ReadGate
from data_plane.config import BrokerConfig
from data_plane.server import serve
from data_plane.tenancy.static import StaticAuthenticator
from tests.broker.clients import Paho
from tests.broker.conftest import TENANTS

MAX_QUEUED = 20  # back-pressure from half: 10 queued
COUNT = 40


async def _clients(port: int) -> tuple[Paho, Paho]:
    def connect() -> tuple[Paho, Paho]:
        sub = Paho(
            port, "acme/d1", "pw1", "bp-sub", properties={"ReceiveMaximum": 1}, connect=False
        )
        sub.client.manual_ack_set(True)
        sub.connect()
        sub.subscribe("bp/#", 1)
        return sub, Paho(port, "acme/d2", "pw2", "bp-pub")

    return await asyncio.to_thread(connect)


def _drain(sub: Paho, count: int, timeout: float) -> list[str]:
    """Receive and acknowledge, one at a time, as a slow but live client does."""
    got: list[str] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        try:
            message = sub.messages.get(timeout=0.1)
        except queue.Empty:
            continue
        got.append(message.payload.decode())
        sub.client.ack(message.mid, message.qos)
    return got


async def _until(predicate, timeout: float) -> float | None:
    """Seconds until `predicate()` held, or None if it did not within `timeout`."""
    started = time.monotonic()
    while not predicate():
        if time.monotonic() - started > timeout:
            return None
        await asyncio.sleep(0.02)
    return time.monotonic() - started


async def test_a_backed_up_subscriber_holds_its_publisher_until_it_drains(monkeypatch):
    monkeypatch.setattr(ReadGate, "THROTTLE_LIMIT", 60.0)  # here only draining releases it
    config = BrokerConfig(port=0, ws_port=0, sys_interval=0, max_queued_messages=MAX_QUEUED)
    server = await serve(config, StaticAuthenticator(TENANTS))
    sub, pub = await _clients(server.listeners["mqtt"][1])
    try:
        sent = [pub.client.publish("bp/t", f"m{i}", 1) for i in range(COUNT)]
        await asyncio.sleep(1.0)
        acknowledged = sum(info.is_published() for info in sent)
        # One in flight, then the queue to half: the broker stopped reading the publisher.
        assert MAX_QUEUED // 2 <= acknowledged < MAX_QUEUED, acknowledged
        got = await asyncio.to_thread(_drain, sub, COUNT, 20.0)
        assert got == [f"m{i}" for i in range(COUNT)]  # all of them, in order: none dropped
        assert await _until(lambda: all(info.is_published() for info in sent), 5.0) is not None
        assert server.broker.stats["acme"].dropped == 0
    finally:
        await asyncio.to_thread(lambda: (sub.close(), pub.close()))
        await server.shutdown()


async def test_a_subscriber_that_never_drains_holds_its_publisher_only_for_the_allowance(
    monkeypatch,
):
    monkeypatch.setattr(ReadGate, "THROTTLE_LIMIT", 1.0)
    config = BrokerConfig(port=0, ws_port=0, sys_interval=0, max_queued_messages=MAX_QUEUED)
    server = await serve(config, StaticAuthenticator(TENANTS))
    sub, pub = await _clients(server.listeners["mqtt"][1])
    try:
        sent = [pub.client.publish("bp/t", f"m{i}", 1) for i in range(COUNT)]
        held = await _until(lambda: sum(info.is_published() for info in sent) >= COUNT, 10.0)
        # Held for the allowance, then released: the rest are acknowledged (and, past the
        # subscriber's queue limit, dropped and counted: it stopped holding publishers).
        assert held is not None and held >= 0.9, held
        assert server.broker.stats["acme"].dropped > 0
    finally:
        await asyncio.to_thread(lambda: (sub.close(), pub.close()))
        await server.shutdown()


class SilentSubscriber:
    """A QoS 0 subscriber on a plain socket that reads nothing until told to: its socket's
    buffers fill, then its session's queue. `read_all` counts the PUBLISH packets that came."""

    def __init__(self, port: int, topic: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        self.reader = Reader(server_side=False, protocol_version=MQTT_5_0)
        connect = Connect("slow-qos0", MQTT_5_0, username="acme/d1", password=b"pw1")
        self.sock.sendall(encode(connect, MQTT_5_0))
        self._until(PacketType.CONNACK)
        subscribe = Subscribe(1, [Subscription(topic, 0)])
        self.sock.sendall(encode(subscribe, MQTT_5_0))
        self._until(PacketType.SUBACK)

    def _until(self, kind: PacketType) -> None:
        while True:
            for packet in self.reader.feed(self.sock.recv(65536)):
                if packet.type is kind:
                    return

    def read_all(self, quiet: float = 1.0) -> int:
        """PUBLISHes received until none came for `quiet` seconds."""
        self.sock.settimeout(quiet)
        count = 0
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except TimeoutError:
                return count
            if not data:
                return count
            count += sum(p.type is PacketType.PUBLISH for p in self.reader.feed(data))


async def test_a_backed_up_qos0_subscriber_holds_its_publisher_instead_of_dropping(monkeypatch):
    """QoS 0 too: the broker stops reading the publisher while the subscriber's queue is backed
    up, rather than reading on and dropping (a fan-in had delivered ~1% of what it read)."""
    monkeypatch.setattr(ReadGate, "THROTTLE_LIMIT", 60.0)  # here only draining releases it
    config = BrokerConfig(port=0, ws_port=0, sys_interval=0)
    server = await serve(config, StaticAuthenticator(TENANTS))
    port = server.listeners["mqtt"][1]
    sub = await asyncio.to_thread(SilentSubscriber, port, "bp0/#")
    pub = await asyncio.to_thread(Paho, port, "acme/d2", "pw2", "bp0-pub")
    total = 20_000  # 20 MiB: far more than the sockets between them buffer
    try:
        payload = b"x" * 1024
        for _ in range(total):
            pub.client.publish("bp0/t", payload, 0)
        await asyncio.sleep(2.0)  # the broker reads until the subscriber's queue backs up
        stats = server.broker.stats["acme"]
        assert stats.publishers_held >= 1
        assert stats.messages_received < total  # it stopped reading the publisher
        received = await asyncio.to_thread(sub.read_all)
        assert stats.messages_received == total  # then read it all as the subscriber drained
        # At most a message per held read past the queue's cap is dropped: (almost) all arrive.
        assert received + stats.dropped == total and stats.dropped <= 100, (received, stats)
        assert stats.subscribers_stalled == 0
    finally:
        await asyncio.to_thread(lambda: (sub.sock.close(), pub.close()))
        await server.shutdown()

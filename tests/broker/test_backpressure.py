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
import time

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

"""Server redirection (MQTT 5.0 §4.11): a broker that leaves tells 5.0 clients where to go
(DISCONNECT 0x9C + Server Reference), refuses new ones the same way while it drains, and the
`redirect` hook can send a tenant's clients elsewhere at CONNECT (0x9C, or 0x9D if for good)."""

from __future__ import annotations

import asyncio
import signal

from data_plane.broker.broker import Redirect
from data_plane.config import BrokerConfig
from data_plane.server import serve
from data_plane.tenancy.static import StaticAuthenticator
from tests.broker.clients import Paho
from tests.broker.conftest import TENANTS, start_broker

ELSEWHERE = "mqtt-b.example.net:8883"


def test_shutdown_sends_clients_to_the_server_reference(tmp_path):
    broker = start_broker(tmp_path, "--server-reference", ELSEWHERE)
    v5 = Paho(broker.port, "acme/d1", "pw1", "leaving-v5")
    v3 = Paho(broker.port, "acme/d2", "pw2", "leaving-v3", v5=False)
    broker.process.send_signal(signal.SIGTERM)
    assert v5.disconnected.wait(5) and v3.disconnected.wait(5)
    assert v5.disconnect_reason.value == 0x9C  # Use another server, not 0x8B
    assert v5.disconnect_properties.ServerReference == ELSEWHERE
    assert broker.process.wait(10) == 0
    v5.close(), v3.close()


def test_evacuation_drains_a_running_broker(tmp_path):
    broker = start_broker(tmp_path, "--server-reference", ELSEWHERE)
    try:
        live = Paho(broker.port, "acme/d1", "pw1", "drained")
        broker.process.send_signal(signal.SIGUSR2)
        assert live.disconnected.wait(5)
        assert live.disconnect_reason.value == 0x9C
        assert live.disconnect_properties.ServerReference == ELSEWHERE
        late = Paho(broker.port, "acme/d2", "pw2", "late", connect=False).connect()
        assert late.reason_code.value == 0x9C
        assert late.connack_properties.ServerReference == ELSEWHERE
        late_v3 = Paho(broker.port, "acme/d3", "pw3", "late-v3", v5=False, connect=False).connect()
        # 3.1.1 has no redirect: return code 3, which paho reports as "Server unavailable".
        assert str(late_v3.reason_code) == "Server unavailable"
        assert broker.process.poll() is None  # still running: drained, not stopped
        live.close(), late.close(), late_v3.close()
    finally:
        broker.stop()


async def test_redirect_hook_moves_one_tenant():
    server = await serve(
        BrokerConfig(port=0, ws_port=0, sys_interval=0), StaticAuthenticator(TENANTS)
    )
    moved = Redirect("eu.mqtt.example.net:8883", permanent=True)
    server.broker.redirect = lambda connect, result: moved if result.tenant == "other" else None
    port = server.listeners["mqtt"][1]
    try:
        other, acme = await asyncio.gather(
            asyncio.to_thread(Paho, port, "other/d1", "other-pw", "o1", connect=False),
            asyncio.to_thread(Paho, port, "acme/d1", "pw1", "a1", connect=False),
        )
        await asyncio.to_thread(other.connect)
        await asyncio.to_thread(acme.connect)
        assert other.reason_code.value == 0x9D  # Server moved (for good)
        assert other.connack_properties.ServerReference == "eu.mqtt.example.net:8883"
        assert acme.reason_code.value == 0
        other.close(), acme.close()
    finally:
        await server.shutdown()

"""Idle strangers cannot take the broker (issue 28, critical): 19,980 idle sockets on the
WebSocket port (never upgraded, no credentials) took every descriptor, and every other tenant's
CONNECT failed. Now a socket must finish its upgrade and CONNECT within the connect timeout, one
address holds a bounded number of unauthenticated sockets, and the last descriptors are kept for
authenticated work. A real broker process on the test database, run with a small descriptor
limit so that the attack fits on loopback."""

from __future__ import annotations

import resource
import socket
import time
from pathlib import Path

import pytest

from tenants.devices import services as device_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.tenancy.test_refusals import broker_with_metrics

pytestmark = pytest.mark.django_db(transaction=True)

DESCRIPTORS = 400  # the broker's limit in these tests


def small_broker(log: Path, *extra: str):
    """A broker process whose descriptor limit is `DESCRIPTORS`."""

    def limit_descriptors() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (DESCRIPTORS, DESCRIPTORS))

    extra = ("--usage-flush-interval", "0.5", *extra)
    return broker_with_metrics(log, *extra, preexec_fn=limit_descriptors)


def idle(port: int, source: str) -> socket.socket | None:
    """A socket that says nothing; None when the broker would not even accept it."""
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=2, source_address=(source, 0))
    except OSError:
        return None
    sock.settimeout(0.05)
    return sock


def closed_by_broker(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


@pytest.fixture
def tenants():
    acme = tenant_services.tenant_create("acme")
    _, acme_secret = device_services.device_create(tenant=acme, name="d", client_id_policy="any")
    beta = tenant_services.tenant_create("beta")
    _, beta_secret = device_services.device_create(tenant=beta, name="d", client_id_policy="any")
    return acme_secret, beta_secret


def test_one_address_cannot_hold_more_than_its_share_of_idle_sockets(tmp_path, tenants):
    acme_secret, beta_secret = tenants
    log = tmp_path / "broker.log"
    with small_broker(log, "--connect-timeout", "2", "--preauth-per-source", "20") as ports:
        attack = [idle(port, "127.0.0.2") for port in [ports["ws"]] * 150 + [ports["mqtt"]] * 50]
        time.sleep(0.3)
        held = [s for s in attack if s is not None and not closed_by_broker(s)]
        # Other tenants connect on every port while the attack lasts.
        during = Paho(ports["mqtt"], "beta/d", beta_secret, "beta-tcp")
        over_ws = Paho(ports["ws"], "acme/d", acme_secret, "acme-ws", transport="websockets")
        time.sleep(2.2)  # the connect timeout, counted from the accept
        still = [s for s in held if not closed_by_broker(s)]
        for sock in attack:
            if sock is not None:
                sock.close()
        during.close(), over_ws.close()
    assert len(held) <= 20  # the one address's share; the rest closed at once
    assert during.reason_code == 0 and over_ws.reason_code == 0
    assert still == []  # never upgraded nor connected: closed at the deadline


def test_the_last_descriptors_are_kept_for_authenticated_work(tmp_path, tenants):
    acme_secret, beta_secret = tenants
    log = tmp_path / "broker.log"
    with small_broker(log, "--connect-timeout", "3", "--preauth-per-source", "20") as ports:
        device = Paho(ports["mqtt"], "acme/d", acme_secret, "in-before")
        device.subscribe("t/#", 1)
        # Many addresses, each within its share: together past the descriptor limit.
        sockets = []
        for n in range(2, 40):
            sockets += [idle(ports["ws"], f"127.0.0.{n}") for _ in range(15)]
        time.sleep(0.3)
        open_ = [s for s in sockets if s is not None and not closed_by_broker(s)]
        # The client already in keeps working: publishes, acknowledgements, deliveries.
        for n in range(5):
            device.publish("t/x", f"m{n}", 1)
        got = [m.payload for m in device.expect(5, 3)]
        time.sleep(3.3)  # the strangers' deadline
        for sock in sockets:
            if sock is not None:
                sock.close()
        after = Paho(ports["mqtt"], "beta/d", beta_secret, "beta-after")
        after.close(), device.close()
        time.sleep(1)  # a usage flush
    assert len(open_) < DESCRIPTORS - 64  # refused before the limit, with headroom kept
    assert got == [f"m{n}".encode() for n in range(5)]
    assert after.reason_code == 0
    text = log.read_text()
    assert "Too many open files" not in text
    assert "refusing new connections (descriptors)" in text

"""Tenant-affine workers (issue 34, point 1): two workers on one port (SO_REUSEPORT), each
client handed at CONNECT to its tenant's home worker over a Unix socket (SCM_RIGHTS).

What a user sees: every client is served (CONNACK as always), messages flow without loss while
clients come and go through either worker, a client id raced onto both workers ends as one
session, a worker killed with -9 leaves its tenants' clients served by the survivor. What the
operator sees: each tenant's clients on one worker (`mqtt_clients_connected{tenant}` per
worker) and the hand-overs counted (`mqtt_handovers{direction}`).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import pytest

from common.runtime import embedded
from data_plane.cluster.affinity import homes
from tests.broker.clients import Paho, race_for_one_client_id
from tests.cluster.conftest import metric, start_node, wait_for

TENANTS = {
    f"t{i:02d}": {
        "devices": {f"d{n}": {"password": f"pw{n}", "client_ids": "any"} for n in range(1, 4)}
    }
    for i in range(20)
}
SLOTS = ["0", "1"]


@pytest.fixture
def workers(tmp_path, redis_url):
    """Two workers of one machine: one port, one cluster, slots 0 and 1."""
    port, ws_port = embedded.free_port(), embedded.free_port()
    cluster = f"affinity-{uuid.uuid4().hex[:6]}"
    started = [
        start_node(
            tmp_path,
            redis_url,
            cluster,
            *("--port", str(port), "--ws-port", str(ws_port), "--reuse-port"),
            *("--worker-slot", slot, "--no-archive"),
            tenants=TENANTS,
        )
        for slot in SLOTS
    ]
    for worker in started:
        wait_for(lambda w=worker: metric(w, "mqtt_affinity_workers") == 2, 10)
    yield port, ws_port, started
    for worker in started:
        worker.stop()


def connected(worker, tenant: str) -> int:
    return int(metric(worker, "mqtt_clients_connected", f'{{tenant="{tenant}"}}'))


def handovers(worker, direction: str) -> int:
    return int(metric(worker, "mqtt_handovers_total", f'{{direction="{direction}"}}'))


def home_worker(tenant: str, started: list):
    return started[SLOTS.index(homes(tenant, SLOTS)[0])]


def test_each_tenant_ends_on_its_home_worker_and_nothing_is_lost(workers):
    port, _ws_port, started = workers
    tenants = sorted(TENANTS)
    subscribers = {t: Paho(port, f"{t}/d1", "pw1", f"sub-{t}", v5=False) for t in tenants}
    # Half the tenants at QoS 1, half at QoS 2 (exactly once: no duplicate across a hand-over).
    qos = {t: 1 + n % 2 for n, t in enumerate(tenants)}
    for tenant, sub in subscribers.items():
        sub.subscribe(f"{tenant}/data", qos=qos[tenant])
    count = 30
    failures: list[str] = []

    def publish(tenant: str) -> None:
        # Connects while the tenants before it publish; its own publishes overlap the next ones'
        # connects (each CONNECT lands on either worker and may be handed over meanwhile).
        try:
            pub = Paho(port, f"{tenant}/d2", "pw2", f"pub-{tenant}")
            for i in range(count):
                pub.publish(f"{tenant}/data", f"{tenant}-{i}", qos=qos[tenant])
                time.sleep(0.005)
            pub.close()
        except Exception as exc:  # noqa: BLE001 - reported by the test thread
            failures.append(f"{tenant}: {exc!r}")

    threads = [threading.Thread(target=publish, args=(t,)) for t in tenants]
    try:
        for thread in threads:
            thread.start()
            time.sleep(0.05)
        # Third clients of every tenant connect meanwhile too (they stay: counted below).
        extra = {t: Paho(port, f"{t}/d3", "pw3", f"extra-{t}") for t in tenants}
        for thread in threads:
            thread.join(30)
        assert failures == []
        for tenant, sub in subscribers.items():
            got = [m.payload.decode() for m in sub.expect(count, timeout=10)]
            # none lost, none twice, in order
            assert got == [f"{tenant}-{i}" for i in range(count)], tenant
        time.sleep(0.3)  # and nothing more arrives (a duplicate after the last)
        assert {
            t: sub.messages.qsize() for t, sub in subscribers.items() if sub.messages.qsize()
        } == {}
        for tenant in tenants:
            home = home_worker(tenant, started)
            away = started[1 - started.index(home)]
            assert (connected(home, tenant), connected(away, tenant)) == (2, 0), tenant
        # About half the 80 connections landed on the other worker and were handed over.
        sent = sum(handovers(w, "sent") for w in started)
        assert sent >= 10 and sent == sum(handovers(w, "received") for w in started)
        assert sum(handovers(w, "failed") for w in started) == 0
        for client in extra.values():
            client.close()
    finally:
        for sub in subscribers.values():
            sub.close()


def test_one_client_id_raced_onto_both_workers_ends_as_one_session(workers):
    port, _ws_port, started = workers
    tenant = "t07"
    before = sum(handovers(w, "sent") for w in started)
    for attempt in range(6):
        racers = [
            Paho(port, f"{tenant}/d1", "pw1", "racer", connect=False, clean=False, expiry=60)
            for _ in range(3)
        ]
        survivor = race_for_one_client_id(racers, attempt)
        assert sum(connected(w, tenant) for w in started) == 1
        watcher = Paho(port, f"{tenant}/d2", "pw2", f"watch-{attempt}")
        survivor.subscribe(f"{tenant}/race", qos=1)
        watcher.publish(f"{tenant}/race", str(attempt), qos=1)
        assert [m.payload for m in survivor.expect(1)] == [str(attempt).encode()]
        watcher.close()
        for racer in racers:
            racer.close()
    assert sum(handovers(w, "sent") for w in started) > before  # racers did land elsewhere


def test_a_worker_killed_leaves_its_tenants_to_the_survivor(workers):
    port, _ws_port, started = workers
    victim, survivor = started
    theirs = [t for t in sorted(TENANTS) if home_worker(t, started) is victim][:4]
    subs = {t: Paho(port, f"{t}/d1", "pw1", f"k-sub-{t}") for t in theirs}
    os.kill(victim.process.pid, signal.SIGKILL)
    victim.process.wait(5)
    # At once (the victim still counts alive for up to two heartbeats: its hand-overs fail and
    # the survivor serves the clients itself), then again once it is known dead.
    for round_ in range(2):
        for tenant in theirs:
            sub = Paho(port, f"{tenant}/d1", "pw1", f"k-sub-{tenant}")  # reconnects
            sub.subscribe(f"{tenant}/after", qos=1)
            pub = Paho(port, f"{tenant}/d2", "pw2", f"k-pub-{tenant}")
            pub.publish(f"{tenant}/after", f"{round_}", qos=1)
            assert [m.payload for m in sub.expect(1)] == [f"{round_}".encode()]
            assert connected(survivor, tenant) == 2
            pub.close()
            sub.close()
        if round_ == 0:
            assert handovers(survivor, "failed") >= 1  # the dead home refused: served here
            wait_for(lambda: metric(survivor, "mqtt_affinity_workers") == 1, 10)
    for sub in subs.values():
        sub.close()


def test_websocket_clients_are_handed_to_their_home_too(workers):
    """A WebSocket lands on either worker (both share the WebSocket port) and is handed over
    after its upgrade, once its first frame holds the CONNECT: the client sees one ordinary
    upgrade and CONNACK, its tenant's clients are all on the home, messages flow both ways
    between WebSocket and TCP clients."""
    port, ws_port, started = workers
    tenants = sorted(TENANTS)[:8]
    before = sum(handovers(w, "sent") for w in started)
    subs = {
        t: Paho(ws_port, f"{t}/d1", "pw1", f"ws-sub-{t}", transport="websockets") for t in tenants
    }
    pubs = {
        t: Paho(ws_port, f"{t}/d2", "pw2", f"ws-pub-{t}", transport="websockets", v5=False)
        for t in tenants
    }
    tcp = {t: Paho(port, f"{t}/d3", "pw3", f"tcp-{t}") for t in tenants}
    try:
        for tenant in tenants:
            subs[tenant].subscribe(f"{tenant}/ws", qos=1)
            tcp[tenant].subscribe(f"{tenant}/back", qos=1)
        for tenant in tenants:
            for i in range(5):
                pubs[tenant].publish(f"{tenant}/ws", f"{tenant}-{i}", qos=1)
            subs[tenant].publish(f"{tenant}/back", "over-ws", qos=1)
        for tenant in tenants:
            got = [m.payload.decode() for m in subs[tenant].expect(5, timeout=10)]
            assert got == [f"{tenant}-{i}" for i in range(5)], tenant
            assert [m.payload for m in tcp[tenant].expect(1)] == [b"over-ws"], tenant
            home = home_worker(tenant, started)
            away = started[1 - started.index(home)]
            assert (connected(home, tenant), connected(away, tenant)) == (3, 0), tenant
        # 24 connections, about half landed on the other worker (none: a 1 in 2^24 chance).
        assert sum(handovers(w, "sent") for w in started) > before
        assert sum(handovers(w, "failed") for w in started) == 0
    finally:
        for client in (*subs.values(), *pubs.values(), *tcp.values()):
            client.close()

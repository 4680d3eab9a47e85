"""Durable shared groups across the nodes of a cluster (issue 45): a group whose members all
left is kept by one holder; a member that comes at another node gets what was kept, handed
over the bus, and what comes after; nothing is lost or doubled. Real broker processes on the
test Postgres and Redis, paho clients."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from tests.broker.clients import Paho
from tests.cluster.conftest import until_routed

pytestmark = pytest.mark.django_db(transaction=True)


def test_what_a_group_kept_at_one_node_reaches_a_member_at_another(nodes, tenant_user):
    _, (a, b, c) = nodes
    user, secret = tenant_user
    topic = f"jobs/{uuid.uuid4().hex[:6]}"
    group = f"$share/workers/{topic}/#"
    first = Paho(a.port, user, secret, "worker-a")
    first.subscribe(group, 1)
    probe = Paho(c.port, user, secret, "probe")
    until_routed(probe, first, f"{topic}/probe")
    first.close()  # the group's only member leaves: node a's holder keeps it
    time.sleep(0.5)  # (the held route reaches the others)
    publisher = Paho(c.port, user, secret, "pub")  # a node that never had a member
    for i in range(200):
        publisher.publish(f"{topic}/x", f"m{i}", 1)
    late = Paho(b.port, user, secret, "worker-b")  # a member again, at another node
    late.subscribe(group, 1)
    time.sleep(0.5)
    for i in range(200, 250):
        publisher.publish(f"{topic}/x", f"m{i}", 1)
    got = [m.payload.decode() for m in late.expect(250, 20)]
    assert sorted(got, key=lambda p: int(p[1:])) == [f"m{i}" for i in range(250)]  # all, once
    kept = [p for p in got if int(p[1:]) < 200]
    assert kept == [f"m{i}" for i in range(200)]  # what was kept, in publish order
    assert late.nothing(1.0)
    for client in (late, publisher, probe):
        client.close()


def test_a_member_joining_at_another_node_gets_the_kept_then_the_live_in_publish_order(
    nodes, tenant_user
):
    """The hand-over runs while a publisher keeps publishing: what node a kept and what comes
    live at node b reach the member in publish order, each once (before the hand-over fence,
    live messages overtook the kept ones on their way from a)."""
    _, (a, b, c) = nodes
    user, secret = tenant_user
    topic = f"jobs/{uuid.uuid4().hex[:6]}"
    group = f"$share/workers/{topic}/#"
    first = Paho(a.port, user, secret, "worker-a")
    first.subscribe(group, 1)
    probe = Paho(c.port, user, secret, "probe")
    until_routed(probe, first, f"{topic}/probe")
    first.close()  # node a's holder keeps the group now
    time.sleep(0.5)  # (the held route reaches the others)
    publisher = Paho(c.port, user, secret, "pub")
    sent: list[str] = []
    stop = threading.Event()

    def publish() -> None:
        i = 0
        while not stop.is_set():
            publisher.publish(f"{topic}/x", f"m{i}", 1)
            sent.append(f"m{i}")
            i += 1

    worker = threading.Thread(target=publish)
    worker.start()
    while len(sent) < 500:
        time.sleep(0.01)
    late = Paho(b.port, user, secret, "worker-b")
    late.subscribe(group, 1)  # while the publisher runs
    while len(sent) < 1500:
        time.sleep(0.01)
    stop.set()
    worker.join(10)
    got = [m.payload.decode() for m in late.expect(len(sent), 30)]
    assert got == [f"m{i}" for i in range(len(sent))]  # all, once, in publish order
    assert late.nothing(1.0)
    for client in (late, publisher, probe):
        client.close()

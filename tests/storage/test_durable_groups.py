"""Durable shared groups on a real broker over Postgres (issue 45): a group keeps what is
published while no member is online, through a kill -9, and hands it to a late member in order;
no other tenant reaches it."""

import time

import pytest

from data_plane.broker.groups import holder_id
from tenants.devices import services as device_services
from tenants.models import MqttQueuedMessage, SharedGroupQueue
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.storage.test_durability import kill9
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)

GROUP = "$share/workers/jobs/#"


@pytest.fixture
def secrets():
    acme = tenant_services.tenant_create("acme")
    tenant_services.tenant_set_quota(acme, {"max_publish_rate": 1_000_000})
    rival = tenant_services.tenant_create("rival")
    made = {}
    for tenant, name in ((acme, "worker"), (acme, "pub"), (rival, "spy")):
        _, made[name] = device_services.device_create(
            tenant=tenant, name=name, client_id_policy="any"
        )
    return made


def _held_rows(tenant: str) -> int:
    return MqttQueuedMessage.objects.filter(
        tenant__slug=tenant, client_id=holder_id("workers", "jobs/#")
    ).count()


def test_a_group_keeps_a_thousand_messages_through_a_kill_9_for_a_late_member(secrets):
    process, port = start_pg_broker()
    try:
        first = Paho(port, "acme/worker", secrets["worker"], "worker-1")
        first.subscribe(GROUP, 1)
        first.close()  # its clean session ends: the group has no member now
        spy = Paho(port, "rival/spy", secrets["spy"], "spy")
        spy.subscribe(GROUP, 1)  # the same group name and filter, in another tenant
        spy.subscribe("#", 1)
        pub = Paho(port, "acme/pub", secrets["pub"], "pub")
        for i in range(1000):
            pub.publish("jobs/a", f"m{i}", 1)  # each acknowledged: committed
        pub.close()
        assert spy.nothing(0.5)
        spy.close()
        assert _held_rows("acme") == 1000
        kill9(process)
    finally:
        if process.poll() is None:
            kill9(process)

    process, port = start_pg_broker()
    try:
        refused = Paho(port, "acme/worker", secrets["worker"], "$group:x")
        assert refused.reason_code.value == 0x85  # the holders' client ids are the broker's
        refused.close()
        late = Paho(port, "acme/worker", secrets["worker"], "worker-2")
        late.subscribe(GROUP, 1)
        received = [m.payload.decode() for m in late.expect(1000, 20)]
        assert received == [f"m{i}" for i in range(1000)]  # all, once, in publish order
        assert late.nothing(0.5)
        deadline = time.monotonic() + 5
        while _held_rows("acme") and time.monotonic() < deadline:
            time.sleep(0.05)  # acknowledged: their rows go with the next commit
        assert _held_rows("acme") == 0
        group = SharedGroupQueue.objects.get(tenant__slug="acme")
        assert (group.name, group.topic_filter, group.members) == ("workers", "jobs/#", 1)
        assert _held_rows("rival") == 0  # its own group of that name got none of them
        late.close()
    finally:
        process.terminate()
        process.wait(timeout=15)


def test_a_kill_9_mid_drain_loses_nothing_the_group_held(secrets):
    process, port = start_pg_broker()
    try:
        first = Paho(port, "acme/worker", secrets["worker"], "worker-1")
        first.subscribe(GROUP, 1)
        first.close()
        pub = Paho(port, "acme/pub", secrets["pub"], "pub")
        sent = [(f"m{i}", pub.client.publish("jobs/a", f"m{i}", 1)) for i in range(3000)]
        for _, info in sent:
            info.wait_for_publish(60)
        held = [payload for payload, info in sent if info.is_published()]  # acknowledged
        assert len(held) == len(sent)
        pub.close()
        late = Paho(port, "acme/worker", secrets["worker"], "worker-2")
        late.subscribe(GROUP, 1)
        first_part = [m.payload.decode() for m in late.expect(500, 30)]
        deadline = time.monotonic() + 15  # some acknowledgements written (a loaded machine's
        while _held_rows("acme") >= len(held) and time.monotonic() < deadline:  # come late)
            time.sleep(0.02)
        kill9(process)  # mid-drain: some delivered and acknowledged, the rest still held
        late.stop_loop()
        first_part += [m.payload.decode() for m in late.expect(len(held), 0.5)]  # and since
    finally:
        if process.poll() is None:
            kill9(process)
    process, port = start_pg_broker()
    try:
        again = Paho(port, "acme/worker", secrets["worker"], "worker-3")
        again.subscribe(GROUP, 1)
        rest: list[str] = []
        deadline = time.monotonic() + 60
        while set(held) - set(first_part) - set(rest) and time.monotonic() < deadline:
            rest += [m.payload.decode() for m in again.expect(100, 1.0)]
        rest += [m.payload.decode() for m in again.expect(len(held), 0.5)]  # repeats, if any
        got = set(first_part) | set(rest)
        assert not set(held) - got, f"{len(set(held) - got)} held messages lost"
        assert len(first_part) >= 500 and len(rest) < len(held)  # the drain did move on
        order = [int(p[1:]) for p in rest]
        assert order == sorted(order)  # what was left comes in publish order
        again.close()
    finally:
        process.terminate()
        process.wait(timeout=15)

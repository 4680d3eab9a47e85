"""The broker's shadow service on its own (a fake broker that only collects what is published,
the in-memory store): what each request costs in AWS's 1 KiB units, that rejected requests cost
nothing, that the units reach the usage log's rows, and that a client's 11th request in flight
is refused with 429 while the others are answered once each."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

from data_plane.broker.hooks import Hooks
from data_plane.broker.message import Message
from data_plane.shadows.service import MAX_IN_FLIGHT, PUBLISHER, ShadowService
from data_plane.shadows.store import MemoryShadows
from data_plane.storage.usage_log import usage_row
from data_plane.tenancy.metering import UsageMeter


class FakeBroker:
    def __init__(self) -> None:
        self.hooks = Hooks()
        self.published: list[Message] = []
        self.journey = None

    def publish(self, message: Message) -> None:
        self.published.append(message)


def service_and_meter():
    broker = FakeBroker()
    meter = UsageMeter()
    service = ShadowService(MemoryShadows(lambda tenant, thing: thing == "lamp"))
    service.attach(broker)
    service.metered = meter.shadow_operations
    auth = SimpleNamespace(tenant="acme", tenant_id=None, device="lamp", quota={}, acl=None)
    return service, broker, meter, auth


def ask(service, auth, topic: str, body) -> None:
    payload = body if isinstance(body, bytes) else json.dumps(body).encode()
    service.request(
        auth, Message(f"$aws/things/lamp/shadow/{topic}", payload, 1, False, publisher="lamp")
    )


def units(meter: UsageMeter) -> int:
    return sum(u.shadow_operations for _, _, u in meter.take(final=True))


async def test_operations_are_metered_in_aws_units_and_reach_the_usage_log():
    service, broker, meter, auth = service_and_meter()
    big = {"state": {"reported": {"blob": "x" * 1500}}}  # 1.5 KiB: two units, as AWS
    ask(service, auth, "update", big)
    await asyncio.sleep(0.05)
    assert units(meter) == 2
    ask(service, auth, "get", b"")
    await asyncio.sleep(0.05)
    answer = broker.published[-1]
    assert answer.topic.endswith("/get/accepted") and answer.publisher == PUBLISHER
    assert units(meter) == -(-len(answer.payload) // 1024)
    ask(service, auth, "update", b"{broken")
    ask(service, auth, "update", {"state": {}, "version": 99})
    await asyncio.sleep(0.05)
    assert units(meter) == 0  # refused requests cost nothing
    ask(service, auth, "delete", b"")
    await asyncio.sleep(0.05)
    meter.shadow_operations("acme", 0)  # a minute row to read back
    rows = meter.take(final=True)
    assert sum(u.shadow_operations for _, _, u in rows) == 1
    tenant, minute, usage = rows[0]
    assert usage_row(tenant, minute, usage, "broker-x")["shadow_operations"] == 1
    assert all(m.qos == 1 and not m.retain for m in broker.published)


async def test_past_ten_in_flight_a_client_is_told_429_and_each_request_is_answered_once():
    service, broker, _, auth = service_and_meter()
    for n in range(MAX_IN_FLIGHT + 5):  # all in one loop turn: none answered yet
        ask(service, auth, "get", {"clientToken": f"t{n}"})
    await asyncio.sleep(0.05)
    answers = [(m.topic.rsplit("/", 1)[1], json.loads(m.payload)) for m in broker.published]
    assert sorted(body["clientToken"] for _, body in answers) == sorted(
        f"t{n}" for n in range(MAX_IN_FLIGHT + 5)
    )
    throttled = [body for kind, body in answers if body.get("code") == 429]
    assert len(throttled) == 5 and throttled[0]["message"] == "Too Many Requests"
    assert service.in_flight == {}  # all answered: nothing held for the client
    ask(service, auth, "get", {"clientToken": "after"})
    await asyncio.sleep(0.05)
    assert json.loads(broker.published[-1].payload)["code"] == 404  # counted afresh


async def test_another_things_request_is_not_admitted_without_a_grant():
    _, _, _, auth = service_and_meter()
    assert ShadowService.admits(auth, "$aws/things/lamp/shadow/update")
    assert not ShadowService.admits(auth, "$aws/things/door/shadow/update")
    assert not ShadowService.admits(auth, "$aws/things/lamp/shadow/update/accepted")
    assert not ShadowService.admits(auth, "$SYS/broker/clients")


class RefusingStore(MemoryShadows):
    """A store that fails any transaction holding tenant `evil`'s request, as Postgres fails a
    batch over one value it refuses that got past validation (a value no check foresaw)."""

    def __init__(self) -> None:
        super().__init__(lambda tenant, thing: True)
        self.transactions = 0

    async def apply(self, ops, now):
        self.transactions += 1
        if any(op.tenant == "evil" for op in ops):
            raise ValueError("invalid input syntax for type json")
        await super().apply(ops, now)


async def test_a_failing_batch_fails_only_the_request_that_fails_alone(caplog):
    """Whatever gets past validation, one tenant's request in a shared batch fails alone: the
    others of the batch are carried out (another tenant's included) and answered accepted, the
    failing one gets AWS's 500 on its rejected topic, logged without a traceback."""
    broker = FakeBroker()
    store = RefusingStore()
    service = ShadowService(store)
    service.attach(broker)
    victim = SimpleNamespace(tenant="acme", tenant_id=None, device="lamp", quota={}, acl=None)
    attacker = SimpleNamespace(tenant="evil", tenant_id=None, device="lamp", quota={}, acl=None)
    for n in range(5):  # all in one batch: none is awaited in between
        if n == 2:
            ask(service, attacker, "update", {"state": {"reported": {"x": 1}}, "clientToken": "e"})
        ask(service, victim, "update", {"state": {"reported": {"n": n}}, "clientToken": f"c{n}"})
    await asyncio.sleep(0.1)
    replies = {
        (m.tenant, json.loads(m.payload).get("clientToken")): (m.topic, json.loads(m.payload))
        for m in broker.published
        if m.topic.endswith(("/accepted", "/rejected"))
    }
    for n in range(5):
        assert replies["acme", f"c{n}"][0].endswith("/update/accepted")
    topic, body = replies["evil", "e"]
    assert topic.endswith("/update/rejected")
    assert (body["code"], body["message"]) == (500, "Internal service failure")
    assert store.shadows["acme", "lamp", ""].version == 5
    assert store.shadows["acme", "lamp", ""].state == {"reported": {"n": 4}}
    assert not any(r.exc_info for r in caplog.records)

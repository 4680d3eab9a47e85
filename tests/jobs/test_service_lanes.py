"""The jobs service serves a fleet's requests a few at a time: a job to thousands of devices has
them all ask at once, and each request holds a connection of the broker's shared write pool for
its transaction. One task per thing on the pool made most of them wait past the pool's timeout
and fail with InternalError (found by `bench.jobs` at 10,000 devices); they must wait their turn
in the service instead, and every one be answered."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from data_plane.broker.message import Message
from data_plane.jobs import service as jobs_service
from data_plane.jobs.service import JobService

THINGS = 200


class SlowStore:
    """A store whose transactions take a while, counting how many run at once."""

    def __init__(self) -> None:
        self.running = self.most = self.done = 0

    async def perform(self, op, now: int) -> None:
        self.running += 1
        self.most = max(self.most, self.running)
        await asyncio.sleep(0.002)
        self.running -= 1
        self.done += 1
        op.accepted = {"timestamp": now}


class Broker:
    journey = None

    def __init__(self) -> None:
        self.topics: list[str] = []

    def publish(self, message: Message) -> int:
        self.topics.append(message.topic)
        return 1


def test_a_fleet_asking_at_once_is_served_a_few_at_a_time_and_all_answered():
    store, broker = SlowStore(), Broker()
    service = JobService(store)
    service.attach(broker)

    async def fleet_asks() -> None:
        for n in range(THINGS):
            thing = f"d{n}"
            auth = SimpleNamespace(tenant="acme", tenant_id=1, acl=None, device=thing)
            topic = f"$aws/things/{thing}/jobs/start-next"
            service.request(auth, Message(topic, b"{}", 1, False, {}, None, thing, "acme"))
        while service.tasks:
            await asyncio.gather(*list(service.tasks))

    asyncio.run(fleet_asks())
    assert store.done == THINGS
    assert store.most <= jobs_service.LANES
    accepted = [t for t in broker.topics if t.endswith("/start-next/accepted")]
    assert len(accepted) == THINGS

"""The live job's republish under the broker's back-pressure (issue 29, point 4, the job's side):
the broker slows a tenant's republishes to its publish rate by not reading the rules' connection
(and by holding its acknowledgements). Here a stand-in broker (the codec of `common.mqtt`) reads
the victim's connection and never the attacker's: the victim's republishes all complete at once,
the attacker's lane holds no more than its bound, and what does not fit waits in the durable
queue rather than in memory."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from django.db import connection

from common.mqtt.codec import Reader, encode
from common.mqtt.packets import MQTT_5_0, Connack, Connect, PubAck, Publish
from spark.rules.actions import Job
from spark.rules.lanes import ActionLanes, LaneLimits
from spark.rules.retry_store import RetryStore
from tenants.models import RuleActionRetry
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.spark.conftest import database_url

pytestmark = pytest.mark.django_db(transaction=True)


class SlowBroker:
    """Acknowledges the victim's publishes; stops reading the attacker's connection."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.received: dict[str, int] = {}
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            self.server = self.loop.run_until_complete(
                asyncio.start_server(self._client, "127.0.0.1", 0)
            )
            self.port = self.server.sockets[0].getsockname()[1]
            ready.set()
            self.loop.run_forever()

        threading.Thread(target=run, daemon=True).start()
        ready.wait(5)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = Reader(server_side=True)
        tenant = None
        while True:
            data = await reader.read(65536)
            if not data:
                return
            for packet in decoder.feed(data):
                if isinstance(packet, Connect):
                    tenant = (packet.username or "").split("/")[0]
                    writer.write(encode(Connack(), MQTT_5_0))
                    if tenant == "evil":  # back-pressure: never read this connection again
                        writer.transport.pause_reading()
                        await asyncio.sleep(3600)
                elif isinstance(packet, Publish):
                    seen = self.received[tenant] = self.received.get(tenant, 0) + 1
                    code = 0
                    if tenant == "busy" and seen == 1:
                        code = 0x97  # quota exceeded: later
                    elif tenant == "bad":
                        code = 0x90  # topic name invalid: for good
                    if packet.qos:
                        writer.write(encode(PubAck(packet.packet_id, code), MQTT_5_0))
            await writer.drain()

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)


def jobs(rule, count: int, size: int) -> list[Job]:
    action = {"type": "republish", "topic": "out/x", "qos": 1}
    prefix = f"$rules-{rule.id}-"
    now = int(time.time() * 1000)
    return [
        Job(rule.id, rule.tenant.slug, prefix, action, {"n": n, "pad": "p" * size}, now)
        for n in range(count)
    ]


def test_a_slowed_tenants_republishes_wait_bounded_and_hold_no_one_else(store):
    broker = SlowBroker()
    evil = tenant_services.tenant_create("evil")
    victim = tenant_services.tenant_create("victim")
    action = [{"type": "republish", "topic": "out/x", "qos": 1}]
    loud = rule_services.rule_create(
        tenant=evil, name="fan", sql='SELECT * FROM "t/#"', actions=action
    )
    quiet = rule_services.rule_create(
        tenant=victim, name="fwd", sql='SELECT * FROM "s/#"', actions=action
    )
    connection.close()
    retries = RetryStore(database_url())
    lanes = ActionLanes(
        store,
        mqtt_port=broker.port,
        service_key=b"k" * 32,
        limits=LaneLimits(max_queued=200, poll_seconds=3600),
        retries=retries,
    )
    try:
        lanes.submit(jobs(loud, 5000, 1024))  # 20,000-output fan-outs, in small
        time.sleep(0.5)
        started = time.monotonic()
        lanes.submit(jobs(quiet, 50, 16))
        deadline = time.monotonic() + 10
        done = []
        while len([o for o in done if o.job.tenant == "victim"]) < 50:
            assert time.monotonic() < deadline, "the victim's republishes were held up"
            done += lanes.completed()
            time.sleep(0.02)
        took = time.monotonic() - started
        print(f"victim's 50 republishes done in {took:.2f}s beside a stalled tenant")
        assert all(o.ok for o in done if o.job.tenant == "victim")
        assert broker.received.get("victim") == 50
        # The attacker's lane: bounded (its queue, plus the 32 its connection has in flight);
        # the rest waits in the durable queue, not in the job's memory.
        time.sleep(1.0)
        held = lanes.backlog().get("evil", 0)
        assert held <= 200 + 32, held
        assert RuleActionRetry.objects.filter(rule=loud).count() >= 5000 - 200 - 32 - 1
        assert not [o for o in lanes.completed() if o.job.tenant == "evil" and o.ok]
    finally:
        lanes.close(grace=0.5)
        retries.close()
        broker.close()


def test_a_refused_republish_is_retried_only_when_the_broker_says_later(store):
    broker = SlowBroker()
    action = [{"type": "republish", "topic": "out/x", "qos": 1}]
    busy = rule_services.rule_create(
        tenant=tenant_services.tenant_create("busy"),
        name="r",
        sql='SELECT * FROM "#"',
        actions=action,
    )
    bad = rule_services.rule_create(
        tenant=tenant_services.tenant_create("bad"),
        name="r",
        sql='SELECT * FROM "#"',
        actions=action,
    )
    connection.close()
    lanes = ActionLanes(
        store, mqtt_port=broker.port, service_key=b"k" * 32, limits=LaneLimits(backoff=0.05)
    )
    try:
        lanes.submit(jobs(busy, 1, 8) + jobs(bad, 1, 8))
        assert lanes.wait_idle(10)
        outcomes = {o.job.tenant: o for o in lanes.completed()}
        assert outcomes["busy"].ok and outcomes["busy"].attempts == 2  # 0x97, then taken
        assert not outcomes["bad"].ok and outcomes["bad"].attempts == 1
        assert outcomes["bad"].error == (
            "republish: the broker refused the message (reason code 0x90)"
        )
    finally:
        lanes.close(grace=0.5)
        broker.close()

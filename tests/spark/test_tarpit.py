"""A webhook that never answers, from the attacker's side (issue 29, point 2): one message with
48 outputs to a tarpit used to hold the live job's whole micro-batch, every tenant's actions
with it (the victim's p50 went to 63 s). Now actions run in per-tenant lanes, each call bounded
(connect, first byte, total), retries from the durable queue: the tarpit holds only the
attacker's slots. The victim's publish → webhook latency is measured before and during, on the
same live job."""

from __future__ import annotations

import statistics
import time

import pytest
from django.db import connection

from bench.rules_live import Tarpit
from spark.rules.actions import ActionRunner
from spark.rules.live import LiveJob
from tenants.models import RuleActionRetry
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.spark.conftest import database_url, message, write_live

pytestmark = pytest.mark.django_db(transaction=True)


def latencies(receiver, sent: dict[int, float], count: int) -> list[float]:
    import json

    calls = receiver.wait(count, 30)
    return sorted(c["at"] - sent[json.loads(c["body"])["n"]] for c in calls[-count:])


def test_a_tarpit_webhook_holds_only_its_own_tenants_actions(spark, store, receiver, tmp_path):
    tarpit = Tarpit()
    try:
        evil = tenant_services.tenant_create("evil")
        victim = tenant_services.tenant_create("victim")
        rule_services.rule_create(
            tenant=evil,
            name="tarpit",
            sql='FOREACH [1..48] AS i DO i FROM "t/#"',
            actions=[{"type": "webhook", "url": tarpit.url}],
        )
        rule_services.rule_create(
            tenant=victim,
            name="hook",
            sql='SELECT payload.n AS n FROM "s/#"',
            actions=[{"type": "webhook", "url": receiver.url}],
        )
        connection.close()
        job = LiveJob(
            spark,
            database_url(),
            store,
            checkpoint=tmp_path / "c",
            runner=ActionRunner(store, attempts=2, backoff=0.2, timeout=4.0),
        )
        job.start()
        try:
            sent: dict[int, float] = {}

            def victim_messages(first: int) -> None:
                for n in range(first, first + 6):
                    sent[n] = time.time()
                    write_live(store, [message("victim", f"s/{n}", {"n": n}, int(sent[n] * 1000))])
                    time.sleep(0.5)

            victim_messages(0)
            before = latencies(receiver, sent, 6)
            now = int(time.time() * 1000)
            write_live(store, [message("evil", f"t/{n}", {}, now + n) for n in range(3)])
            time.sleep(1.0)  # the tarpit holds the attacker's calls now
            victim_messages(100)
            during = latencies(receiver, sent, 6)
            print(
                f"victim publish→webhook p50 before {statistics.median(before):.2f}s, during "
                f"{statistics.median(during):.2f}s (max {during[-1]:.2f}s); "
                f"tarpit holds {len(tarpit.held)} connections"
            )
            assert len(tarpit.held) >= 1  # the attack was under way
            assert statistics.median(during) <= statistics.median(before) + 2.0, (before, during)
            assert during[-1] <= 15.0
            # The attacker's lane: at most its concurrency in the tarpit at once.
            assert job.lanes.backlog().get("evil", 0) > 0
            assert len(tarpit.held) <= 8 * 2
        finally:
            job.stop()
        # What the attacker's lane had not done waits in the durable queue for its next try.
        assert RuleActionRetry.objects.filter(rule__tenant=evil).exists()
    finally:
        tarpit.close()

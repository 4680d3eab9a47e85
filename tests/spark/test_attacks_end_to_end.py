"""Every attack of issue 29 at once, on the real platform parts (a broker on Postgres writing the
archive, `manage.py run_rules --live` as `make run` starts it, paho devices, real receivers):
a CPU-heavy rule over 1 MiB payloads, a webhook to a tarpit with 48 outputs a message, a NUL in
a failing webhook's output, and a FOREACH of 20,000 republishes. The victim tenant's live rule
keeps its publish → webhook latency within the target (p50 ≤ 5 s, p99 ≤ 15 s), and its
bookkeeping is whole."""

from __future__ import annotations

import json
import signal
import statistics
import threading
import time

import pytest
from django.db import connection

from bench.rules_live import Tarpit
from tenants.devices import services as device_services
from tenants.models import RuleActionRetry, RuleDeadLetter, RuleMetrics
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.spark.conftest import Receiver
from tests.spark.test_end_to_end import platform, start_live  # noqa: F401 (fixture)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.serial  # asserts the publish -> action latency target: not beside other tests
def test_the_victims_rule_keeps_its_latency_while_every_attack_runs(
    platform,  # noqa: F811
    receiver,
    tmp_path,
):
    port, store, _ = platform
    tarpit, failing = Tarpit(), Receiver(statuses=[500] * 1000)
    try:
        victim = tenant_services.tenant_create("victim")
        evil = tenant_services.tenant_create("evil")
        tenant_services.tenant_set_quota(evil, {"max_message_size": 2 << 20})
        _, victim_secret = device_services.device_create(
            tenant=victim, name="d", client_id_policy="any"
        )
        _, evil_secret = device_services.device_create(
            tenant=evil, name="d", client_id_policy="any"
        )
        hot = rule_services.rule_create(
            tenant=victim,
            name="hot",
            sql='SELECT payload.seq AS seq FROM "s/#"',
            actions=[{"type": "webhook", "url": receiver.url}],
        )
        attacks = {
            "cpu": (
                "FOREACH [1..100000] AS i DO i INCASE sha256(payload) = 'x' FROM \"cpu/#\"",
                [],
            ),
            "tarpit": (
                'FOREACH [1..48] AS i DO i FROM "tarpit/#"',
                [{"type": "webhook", "url": tarpit.url}],
            ),
            "fan": (
                'FOREACH [1..20000] AS i DO i FROM "fan/#"',
                [{"type": "republish", "topic": "o/${i}"}],
            ),
        }
        for name, (sql, actions) in attacks.items():
            rule_services.rule_create(tenant=evil, name=name, sql=sql, actions=actions)
        # A second attacker's NUL (its own lane: not queued behind the first one's tarpit).
        nul_tenant = tenant_services.tenant_create("evil2")
        _, nul_secret = device_services.device_create(
            tenant=nul_tenant, name="d", client_id_policy="any"
        )
        rule_services.rule_create(
            tenant=nul_tenant,
            name="nul",
            sql='SELECT payload.s AS s FROM "nul/#"',
            actions=[{"type": "webhook", "url": failing.url}],
        )
        connection.close()
        job = start_live(port, store, tmp_path)
        try:
            device = Paho(port, "victim/d", victim_secret, "dev-1")
            attacker = Paho(port, "evil/d", evil_secret, "bad-1")
            nul_sender = Paho(port, "evil2/d", nul_secret, "bad-2")
            stop = threading.Event()

            def attack() -> None:
                bomb = b"x" * 1_000_000  # under the broker's 1 MiB packet limit
                while not stop.is_set():
                    attacker.publish("cpu/1", bomb, 0)
                    attacker.publish("tarpit/1", "{}", 0)
                    nul_sender.publish("nul/1", json.dumps({"s": "a\u0000b"}), 0)
                    attacker.publish("fan/1", "{}", 0)
                    stop.wait(0.5)

            threading.Thread(target=attack, daemon=True).start()
            time.sleep(3)  # the attack under way
            sent: dict[int, float] = {}
            count = 12
            for seq in range(count):
                sent[seq] = time.time()
                device.publish("s/1", json.dumps({"seq": seq}), 1)
                time.sleep(0.25)
            calls = receiver.wait(count, 60)
            stop.set()
            latencies = sorted(c["at"] - sent[json.loads(c["body"])["seq"]] for c in calls)
            print(
                f"victim publish→webhook under attack: p50 {statistics.median(latencies):.2f}s "
                f"max {latencies[-1]:.2f}s; tarpit holds {len(tarpit.held)}"
            )
            # Through the live feed (issue 43; 5 s before it). The victim's rule is answered
            # natively and acted on before the batch's Python pass, where the attacker's heavy
            # rules run (`outputs_in_phases`): p50 0.34-0.48 s measured alone (0.69-0.72 s
            # when it waited for that pass; bench/RESULTS.md); twice the 0.5 s here,
            # for a loaded machine.
            assert statistics.median(latencies) <= 1.0, (latencies, "".join(job.log[-40:]))
            assert latencies[-1] <= 10.0, latencies
            # The NUL output's webhook fails (500) through its retries (0.5, 1, 2 s apart, from
            # the durable queue), then is dead-lettered with the NUL escaped.
            deadline = time.monotonic() + 30
            while not RuleDeadLetter.objects.filter(rule__tenant=nul_tenant).exists():
                assert time.monotonic() < deadline, (
                    list(RuleMetrics.objects.filter(rule__tenant=evil).values()),
                    list(RuleActionRetry.objects.values("rule_id", "attempts", "last_error")[:5]),
                    [ln for ln in job.log if "WARN" in ln or "ERROR" in ln][-10:],
                )
                time.sleep(0.5)
        finally:
            job.send_signal(signal.SIGINT)
            assert job.wait(timeout=90) == 0, "".join(job.log[-40:])
        metrics = RuleMetrics.objects.get(rule=hot)
        assert (metrics.matched, metrics.passed, metrics.actions_ok) == (count, count, count)
        # The attacker's own bookkeeping is there too: its NUL output and its fan-out.
        letter = RuleDeadLetter.objects.filter(rule__tenant=nul_tenant).first()
        assert letter.output == {"s": "a\\u0000b"} and "HTTP 500" in letter.error
        assert RuleDeadLetter.objects.filter(rule__tenant=evil, rule__name="fan").exists()
    finally:
        tarpit.close()
        failing.close()

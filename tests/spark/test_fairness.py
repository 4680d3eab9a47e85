"""A CPU-heavy rule from the attacker's side (issue 29, point 1): FOREACH over sha256 of a 1 MiB
payload used to hold every tenant's live batch for as long as it ran. Now each message has a
budget (0.2 s), each tenant a share of each task (0.5 s) after which its rows wait no longer
for it, and a rule that keeps going over budget is paused with a notice. The victim's batch is
measured before and during the attack, on the same live job."""

from __future__ import annotations

import time

import pytest
from django.db import connection

from spark.archive import spark_schema
from spark.rules.actions import ActionRunner
from spark.rules.live import LiveJob
from tenants.models import AuditEntry, Rule, RuleDeadLetter, RuleMetrics
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.spark.conftest import message, write_live

pytestmark = pytest.mark.django_db(transaction=True)
MIB = "x" * (1 << 20)
CPU_RULE = "FOREACH [1..2000] AS i DO i INCASE sha256(payload) = 'no' FROM \"cpu/#\""


def batch_of(spark, store, rows):
    key = write_live(store, rows)
    return spark.read.schema(spark_schema()).parquet(str(store.root / key))


@pytest.mark.serial  # bounds a batch's wall time: measured alone (6.6 s beside 3 workers, 3.7 alone)
def test_a_cpu_heavy_rule_holds_up_neither_the_batch_nor_the_victim(
    spark, store, tmp_path, monkeypatch
):
    monkeypatch.setenv("RULES_PAUSE_AFTER", "4")
    evil = tenant_services.tenant_create("evil")
    victim = tenant_services.tenant_create("victim")
    bomb = rule_services.rule_create(tenant=evil, name="cpu", sql=CPU_RULE)
    honest = rule_services.rule_create(
        tenant=victim, name="hot", sql='SELECT payload.t AS t FROM "s/#" WHERE payload.t > 1'
    )
    connection.close()
    runner = ActionRunner(store, attempts=1)
    job = LiveJob(spark, _dsn(), store, checkpoint=tmp_path / "c", runner=runner)
    try:
        now = int(time.time() * 1000)
        victims = [message("victim", f"s/{n}", {"t": 5}, now + n) for n in range(20)]
        job.handle_batch(batch_of(spark, store, victims), 1)  # warm
        started = time.monotonic()
        job.handle_batch(batch_of(spark, store, victims), 2)
        before = time.monotonic() - started

        attack = [message("evil", f"cpu/{n}", MIB, now + n) for n in range(16)]
        started = time.monotonic()
        job.handle_batch(batch_of(spark, store, attack + victims), 3)
        during = time.monotonic() - started
        print(f"victim batch before {before:.2f}s, during the attack {during:.2f}s")
        # Unbounded, the attack cost 16 x 2000 x sha256(1 MiB): 20 s or so on top of the batch
        # (CPU time; more on a busy machine). Bounded: its share, 0.5 s, and moving 16 MiB.
        assert during < before + 5.0, (before, during)
        assert job.batches == 3 and job.last_batch_error is None
    finally:
        job.stop()

    # The victim's rows were all evaluated, in the same batches.
    assert RuleMetrics.objects.get(rule=honest).passed == 60
    # The attacker's messages failed (counted), each over budget or past its tenant's share.
    metrics = RuleMetrics.objects.get(rule=bomb)
    assert metrics.failed == 16 and "rule exceeded its budget" in metrics.last_error
    letters = list(RuleDeadLetter.objects.filter(rule=bomb))
    over = [x for x in letters if "(time)" in x.error]
    assert over and all(x.action == {"type": "budget"} for x in letters)
    assert over[0].output["topic"].startswith("cpu/")  # which message it was
    shared = [x for x in letters if "(share)" in x.error]
    assert shared and sum(x.output["messages"] for x in shared) == 16 - len(over)


def test_a_rule_that_keeps_going_over_budget_is_paused_with_a_notice(
    spark, store, tmp_path, monkeypatch
):
    monkeypatch.setenv("RULES_PAUSE_AFTER", "3")
    monkeypatch.setenv("RULES_TENANT_SHARE_SECONDS", "30")  # every message meets its budget
    evil = tenant_services.tenant_create("evil")
    bomb = rule_services.rule_create(tenant=evil, name="cpu", sql=CPU_RULE)
    connection.close()
    job = LiveJob(
        spark, _dsn(), store, checkpoint=tmp_path / "c", runner=ActionRunner(store, attempts=1)
    )
    try:
        now = int(time.time() * 1000)
        attack = [message("evil", f"cpu/{n}", MIB, now + n) for n in range(4)]
        job.handle_batch(batch_of(spark, store, attack), 1)
        bomb.refresh_from_db()
        assert bomb.paused_at is not None and "over the rule's budget" in bomb.paused_reason
        entry = AuditEntry.objects.get(tenant_id=evil.id, action="rule.paused")
        assert entry.target == "cpu" and entry.via == "system"
        # Paused, it no longer runs: a later batch does not evaluate it.
        job.handle_batch(batch_of(spark, store, attack), 2)
        assert RuleMetrics.objects.get(rule=bomb).failed == 4
    finally:
        job.stop()
    # The tenant sees it (API), and enabling it again resumes it.
    body = rule_services.rule_update(Rule.objects.get(id=bomb.id), enabled=True)
    assert body.paused_at is None and body.paused_reason == ""


def _dsn() -> str:
    from tests.spark.conftest import database_url

    return database_url()

"""The ledger of rule actions done, on the real database (no Spark): what `new-only` claims and
skips, per rule version; claims given back when the action failed; two runs never both taking
one action; a rule deleted meanwhile; and dead-letter replays that neither repeat what a run did
since nor forget what they delivered. A run's claims stay its own until it confirms them: those
of a run that ended (or went stale) unconfirmed are given back, what was confirmed stays."""

from __future__ import annotations

import json
import threading

import psycopg
import pytest
from django.db import connection

from spark.rules import ledger
from spark.rules.actions import Job, Outcome
from spark.rules.firing import Gate
from tenants.models import RuleActionLedger, RuleDeadLetter
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.spark.conftest import database_url

pytestmark = pytest.mark.django_db(transaction=True)
TS = 1_767_225_600_000


def jobs(rule_id: int, version: int, messages: list[str], actions: int = 1) -> list[Job]:
    return [
        Job(
            rule_id,
            "acme",
            f"$rules-{rule_id}-",
            {"type": "webhook", "url": "https://e.com/h"},
            {"m": message},
            TS,
            key=ledger.ActionKey(rule_id, version, message, 0, action, TS),
        )
        for message in messages
        for action in range(actions)
    ]


def connect() -> psycopg.Connection:
    return psycopg.connect(database_url(), autocommit=True)


@pytest.fixture
def rule():
    tenant = tenant_services.tenant_create("acme")
    created = rule_services.rule_create(tenant=tenant, name="r", sql='SELECT * FROM "t/#"')
    connection.close()
    return created


def test_new_only_claims_once_per_rule_version_and_gives_back_failures(rule):
    gate = Gate("new-only", connect)
    first = jobs(rule.id, 1, ["b-1:0", "b-1:1", "b-1:2"], actions=2)
    run, skipped = gate.admit(first)
    assert (len(run), skipped) == (6, 0)
    # One action failed: its claim is given back; the others are done.
    gate.settle(
        [Outcome(j, ok=not (j.key.message_id == "b-1:1" and j.key.action == 1)) for j in run]
    )
    again, skipped = gate.admit(first)
    assert [(j.key.message_id, j.key.action) for j in again] == [("b-1:1", 1)]
    assert skipped == 5
    # A new version of the rule has done nothing yet.
    assert len(gate.admit(jobs(rule.id, 2, ["b-1:0", "b-1:1", "b-1:2"], actions=2))[0]) == 6
    # Actions of messages without an id cannot be told apart: they fire.
    unkeyed = [Job(rule.id, "acme", "p", {}, {}, TS)]
    assert gate.admit(unkeyed) == (unkeyed, 0)
    gate.close()
    # Claims never settled (the one taken again, version 2's) are given back by `close`.
    assert RuleActionLedger.objects.filter(rule=rule, version=1).count() == 5
    assert not RuleActionLedger.objects.filter(version=2).exists()


def test_all_records_what_succeeded_and_none_fires_nothing(rule):
    everything = Gate("all", connect)
    batch = jobs(rule.id, 1, ["s-1:0", "s-1:1"])
    assert everything.admit(batch) == (batch, 0)
    everything.settle([Outcome(batch[0], ok=True), Outcome(batch[1], ok=False)])
    everything.close()
    assert set(RuleActionLedger.objects.values_list("message_id", flat=True)) == {"s-1:0"}
    assert Gate("none").admit(batch) == ([], 2)
    new_only = Gate("new-only", connect)
    assert [j.key.message_id for j in new_only.admit(batch)[0]] == ["s-1:1"]
    new_only.close()


def test_two_runs_at_once_never_take_the_same_action(rule):
    batch = jobs(rule.id, 1, [f"c-1:{i}" for i in range(500)])
    taken: list[list[Job]] = []
    start, claimed = threading.Barrier(2), threading.Barrier(2)

    def claim() -> None:
        gate = Gate("new-only", connect)
        start.wait()
        taken.append(gate.admit(batch)[0])
        # Both runs hold their claims now: closing gives back what was never settled, and a run
        # whose claim came after the other's close would rightly take those keys again.
        claimed.wait()
        gate.close()

    threads = [threading.Thread(target=claim) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ids = [j.key.message_id for run in taken for j in run]
    assert sorted(ids) == sorted(j.key.message_id for j in batch)  # each once, in one run


def test_the_live_jobs_keys_wait_while_the_database_is_away_and_skip_deleted_rules(rule):
    pending = ledger.Pending(max_pending=3)
    pending.add(j.key for j in jobs(rule.id, 1, ["l-1:0", "l-1:1"]))
    assert not pending.flush(None) and len(pending.keys) == 2
    pending.add(j.key for j in jobs(999_999, 1, ["gone:0"]))  # a rule deleted meanwhile
    pending.add(j.key for j in jobs(rule.id, 1, ["l-1:2"]))
    assert pending.dropped == 1 and len(pending.keys) == 3  # bounded: the oldest said and gone
    with connect() as conn:
        assert pending.flush(conn)
    assert sorted(RuleActionLedger.objects.values_list("message_id", "source")) == [
        ("l-1:1", "live"),
        ("l-1:2", "live"),
    ]


def test_a_replay_drops_letters_a_run_did_since_and_records_what_it_delivers(rule, receiver):
    rule.actions = [{"type": "webhook", "url": receiver.url, "secret": "s" * 32}]
    rule.save()
    done, pending = jobs(rule.id, 1, ["d-1:0", "d-1:1"])
    for job in (done, pending):
        RuleDeadLetter.objects.create(
            rule=rule,
            action={"type": "webhook", "url": receiver.url},
            output=job.output,
            error="webhook: HTTP 503",
            ledger_key=job.key.encode(),
        )
    with connect() as conn:
        ledger.record(conn, [done.key], ledger.RUN)  # a run did the first since
    result = rule_services.rule_dead_letters_replay(rule)
    assert (result["replayed"], result["delivered"], result["done_already"]) == (1, 1, 1)
    assert [json.loads(c["body"]) for c in receiver.wait(1, 10)] == [{"m": "d-1:1"}]
    assert not RuleDeadLetter.objects.exists()
    assert RuleActionLedger.objects.get(message_id="d-1:1").source == "replay"
    # So a new-only run will not fire it again either.
    gate = Gate("new-only", connect)
    assert gate.admit([pending]) == ([], 1)
    gate.close()


def test_the_ledger_forgets_messages_older_than_its_days(rule, settings):
    from datetime import UTC, datetime, timedelta

    from tenants.rules.runs.services import ledger_prune

    settings.RULE_LEDGER_DAYS = 30
    now = datetime.now(UTC)
    with connect() as conn:
        ledger.record(
            conn,
            [
                ledger.ActionKey(
                    rule.id, 1, "o-1:0", 0, 0, int((now - timedelta(days=31)).timestamp() * 1000)
                ),
                ledger.ActionKey(
                    rule.id, 1, "r-1:0", 0, 0, int((now - timedelta(days=29)).timestamp() * 1000)
                ),
            ],
            ledger.LIVE,
        )
    assert ledger_prune(now) == 1
    assert list(RuleActionLedger.objects.values_list("message_id", flat=True)) == ["r-1:0"]


def run_of(rule, api=None):
    from datetime import UTC, datetime, timedelta

    from tenants.rules.runs import services as runs

    now = datetime.now(UTC)
    return runs.run_start(
        rule=rule, start=now - timedelta(hours=1), end=now, dispatch_now=False, operator=True
    )


def test_a_stale_runs_unconfirmed_claims_go_back_and_its_confirmed_ones_stay(rule):
    from datetime import timedelta

    from django.utils import timezone

    from tenants.models import RuleRun
    from tenants.rules.runs import services as runs

    lost = run_of(rule)
    RuleRun.objects.filter(pk=lost.pk).update(state="running", heartbeat_at=timezone.now())
    gate = Gate("new-only", connect, str(lost.pk))
    confirmed = jobs(rule.id, 1, ["k-1:0", "k-1:1"])
    gate.settle([Outcome(j, ok=True) for j in gate.admit(confirmed)[0]])
    in_flight = jobs(rule.id, 1, ["k-1:2", "k-1:3"])
    assert len(gate.admit(in_flight)[0]) == 2
    gate._conn.close()  # the worker is killed here: no settle, no close
    everything = confirmed + in_flight
    # While its worker may be alive, its claims hold: nobody else fires them.
    assert runs.runs_reclaim(tenant_id=rule.tenant_id) == {"failed": 0, "released": 0}
    assert Gate("new-only", connect).admit(everything) == ([], 4)
    # No heartbeat for longer than STALE_AFTER: failed, its unconfirmed claims given back.
    RuleRun.objects.filter(pk=lost.pk).update(
        heartbeat_at=timezone.now() - runs.STALE_AFTER - timedelta(seconds=1)
    )
    assert runs.runs_reclaim() == {"failed": 1, "released": 2}
    assert RuleRun.objects.get(pk=lost.pk).state == "failed"
    again = Gate("new-only", connect)
    assert [j.key.message_id for j in again.admit(everything)[0]] == ["k-1:2", "k-1:3"]
    again.close()


def test_an_ended_run_gives_back_what_it_could_not_confirm(rule):
    from tenants.rules.runs.services import claims_release

    ended = run_of(rule)
    gate = Gate("new-only", connect, str(ended.pk))
    batch = jobs(rule.id, 1, ["e-1:0", "e-1:1", "e-1:2"])
    admitted = gate.admit(batch)[0]
    # The first confirmed; the live job did the second meanwhile (its record wins); the
    # third's outcome never came back (the database went away under the settle).
    gate.settle([Outcome(admitted[0], ok=True)])
    with connect() as conn:
        ledger.record(conn, [admitted[1].key], ledger.LIVE)
    gate._conn.close()
    assert claims_release(ended.pk) == 1
    assert sorted(RuleActionLedger.objects.values_list("message_id", "fired")) == [
        ("e-1:0", True),
        ("e-1:1", True),
    ]


def test_a_gate_closed_after_its_pool_failed_gives_its_claims_back(rule):
    gate = Gate("new-only", connect)  # an operator's backfill: no RuleRun owns its claims
    batch = jobs(rule.id, 1, ["p-1:0", "p-1:1"])
    done = gate.admit(batch)[0]
    gate.settle([Outcome(done[0], ok=True)])
    gate.admit(jobs(rule.id, 1, ["p-1:2"]))  # ... and the pool raised before it ran
    gate.close()
    assert sorted(RuleActionLedger.objects.values_list("message_id", flat=True)) == [
        "p-1:0",
    ]


def test_a_replay_leaves_a_letter_a_run_under_way_has_claimed(rule, receiver):
    rule.actions = [{"type": "webhook", "url": receiver.url, "secret": "s" * 32}]
    rule.save()
    (job,) = jobs(rule.id, 1, ["q-1:0"])
    RuleDeadLetter.objects.create(
        rule=rule,
        action={"type": "webhook", "url": receiver.url},
        output=job.output,
        error="webhook: HTTP 503",
        ledger_key=job.key.encode(),
    )
    under_way = run_of(rule)
    gate = Gate("new-only", connect, str(under_way.pk))
    assert gate.admit([job]) == ([job], 0)
    result = rule_services.rule_dead_letters_replay(rule)
    assert (result["replayed"], result["done_already"], result["remaining"]) == (0, 0, 1)
    assert receiver.calls == []
    gate.settle([Outcome(job, ok=True)])  # the run fired it: the next replay drops the letter
    gate.close()
    assert rule_services.rule_dead_letters_replay(rule)["done_already"] == 1

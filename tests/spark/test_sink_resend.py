"""Re-send from history (issue 47, point 3): a tenant's run over an archived range whose only
action is a sink, `new-only`, on the real parts: the API and the run (the Celery task's body in
a thread) on the suite's local Spark, the platform's Postgres (the outbox, the action ledger),
the live job's sink sender and a real HTTP receiver at the far end.

Every message of the range lands in the HTTP-batch sink's outbox once, and at the receiver once;
the rule's other action (a webhook) does not fire; a second identical run appends nothing. An
output the sender gave up on (a dead letter) is not done: a `new-only` re-send queues it again."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from django.db import connection

from spark.rules import ledger
from spark.rules.actions import Job
from spark.rules.firing import Gate
from spark.rules.outbox import SinkOutbox as Outbox
from spark.rules.sink_sender import SinkSender
from tenants.models import RuleActionLedger, RuleDeadLetter, SinkOutbox
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.sinks.conftest import Receiver as BatchReceiver
from tests.spark.conftest import database_url, message, write_live
from tests.spark.test_rule_runs import SECRET, iso, owner, wait_run, worker  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def _resend(api, start: datetime, end: datetime) -> dict:
    body = {"from": iso(start), "to": iso(end), "mode": "run", "actions": "new-only", "action": 2}
    response = api.post("/api/v1/rules/fwd/runs", body, format="json")
    assert response.status_code == 202, response.content
    assert response.json()["action"] == 2
    return wait_run(api, "fwd", response.json()["id"])


def test_a_range_re_sent_to_one_sink_arrives_once_and_no_other_action_fires(
    spark,
    store,
    worker,  # noqa: F811
    receiver,
):
    far = BatchReceiver()
    try:
        acme, api = owner("acme")
        rule = rule_services.rule_create(
            tenant=acme, name="fwd", sql='SELECT payload.n AS n FROM "in/#"',
            actions=[{"type": "webhook", "url": receiver.url, "secret": SECRET},
                     {"type": "http_batch", "url": far.url}],
        )  # fmt: skip
        now = datetime.now(UTC)
        base = int((now - timedelta(hours=2)).timestamp() * 1000)
        write_live(store, [message("acme", "in/a", {"n": n}, base + n) for n in range(30)])
        write_live(store, [message("acme", "out/a", {"n": 99}, base + 50)])  # not FROM's
        connection.close()
        start, end = now - timedelta(hours=3), now

        first = _resend(api, start, end)
        assert first["state"] == "done", first
        assert (first["matched"], first["actions_fired"], first["actions_failed"]) == (30, 30, 0)
        assert first["actions_skipped"] == 30  # the webhook's, not fired
        queued = SinkOutbox.objects.filter(rule=rule)
        assert sorted(json.loads(r.body)["n"] for r in queued) == list(range(30))
        assert set(queued.values_list("action_index", flat=True)) == {1}
        done = RuleActionLedger.objects.filter(rule=rule, fired=True)
        assert set(done.values_list("action", "source").distinct()) == {(1, "run")}

        second = _resend(api, start, end)  # the same again: all done already
        assert (second["state"], second["actions_fired"], second["actions_skipped"]) == (
            "done", 0, 60,
        )  # fmt: skip
        assert SinkOutbox.objects.filter(rule=rule).count() == 30

        sender = SinkSender(database_url(), workers=1, poll=0.05, backoff=0.2, max_backoff=0.5)
        sender.start()
        try:
            deadline = time.monotonic() + 30
            while SinkOutbox.objects.filter(rule=rule).exists():
                assert time.monotonic() < deadline, "the outbox did not drain"
                time.sleep(0.1)
        finally:
            sender.stop()
        delivered = [o["n"] for call in far.calls for o in json.loads(call["body"])]
        assert sorted(delivered) == list(range(30))  # each once
        assert receiver.calls == []  # the rule's webhook never fired
    finally:
        far.close()


def test_an_output_the_sender_gave_up_on_is_re_sent_by_a_new_only_run():
    far = BatchReceiver(statuses=[400] * 5)  # refused for good: dead letters at once
    try:
        tenant = tenant_services.tenant_create("acme")
        action = {"type": "http_batch", "url": far.url}
        rule = rule_services.rule_create(
            tenant=tenant, name="out", sql='SELECT * FROM "in/#"', actions=[action]
        )
        ts = int(time.time() * 1000)
        jobs = [
            Job(rule.id, tenant.slug, f"$rules-{rule.id}-", action, {"n": n}, ts,
                key=ledger.ActionKey(rule.id, rule.version, f"m{n}", 0, 0, ts), action_index=0)
            for n in range(2)
        ]  # fmt: skip
        dsn = database_url()
        outbox = Outbox(dsn, ledger.RUN)
        assert all(o.ok for o in outbox.append(jobs))
        outbox.close()
        assert RuleActionLedger.objects.filter(rule=rule, fired=True).count() == 2
        sender = SinkSender(dsn, workers=1, poll=0.05)
        sender.start()
        try:
            deadline = time.monotonic() + 30
            while RuleDeadLetter.objects.filter(rule=rule).count() < 2:
                assert time.monotonic() < deadline, "no dead letters"
                time.sleep(0.1)
        finally:
            sender.stop()
        assert not RuleActionLedger.objects.filter(rule=rule).exists()
        gate = Gate("new-only", lambda: psycopg.connect(dsn, autocommit=True))
        assert len(gate.admit(jobs)[0]) == 2  # a re-send of their range queues them again
        gate.close()
    finally:
        far.close()

"""Bookkeeping one tenant cannot poison (issue 29, point 3): an attacker's rule whose failing
webhook output holds a NUL character (which Postgres' jsonb and text refuse) used to fail the
dead-letter insert, and with it the whole live batch: every tenant's dead letters and rule usage
were lost. Now the victim keeps all of its dead letters and is billed every unit, the attacker's
letter is stored (NUL escaped for display, the exact body kept for the replay), and the batch
counts as done."""

from __future__ import annotations

import json
import time

import pytest
from django.db import connection

from spark.archive import spark_schema
from spark.rules.actions import ActionRunner
from spark.rules.live import LiveJob
from tenants.models import RuleDeadLetter, RuleMetrics
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.spark.conftest import (
    Receiver,
    database_url,
    message,
    rule_usage,
    signature_ok,
    write_live,
)

pytestmark = pytest.mark.django_db(transaction=True)
SECRET = "whsec-bookkeeping-test-0001"


def test_a_nul_in_one_tenants_output_loses_no_other_tenants_bookkeeping(spark, store, tmp_path):
    failing = Receiver(statuses=[500] * 100)
    try:
        evil = tenant_services.tenant_create("evil")
        victim = tenant_services.tenant_create("victim")
        poisoned = rule_services.rule_create(
            tenant=evil,
            name="nul",
            # The output string holds a NUL, and so does the error of the second rule.
            sql='SELECT payload.s AS s FROM "t/#"',
            actions=[{"type": "webhook", "url": failing.url, "secret": SECRET}],
        )
        broken = rule_services.rule_create(
            tenant=evil, name="err", sql='SELECT json_decode(payload.s) AS x FROM "t/#"'
        )
        honest = rule_services.rule_create(
            tenant=victim,
            name="hook",
            sql='SELECT payload.n AS n FROM "t/#"',
            actions=[{"type": "webhook", "url": failing.url, "secret": SECRET}],
        )
        connection.close()
        now = int(time.time() * 1000)
        rows = [message("evil", "t/x", {"s": "a\u0000b\ud800c"}, now)]
        rows += [message("victim", f"t/{n}", {"n": n}, now + n) for n in range(5)]
        key = write_live(store, rows)
        batch = spark.read.schema(spark_schema()).parquet(str(store.root / key))
        runner = ActionRunner(store, attempts=1, backoff=0.01)
        job = LiveJob(spark, database_url(), store, checkpoint=tmp_path / "c", runner=runner)
        try:
            job.handle_batch(batch, 1)
        finally:
            job.stop()

        assert job.batches == 1 and job.last_batch_error is None  # the batch was not dropped
        # The victim's bookkeeping is whole: every dead letter, every unit, every action.
        assert RuleDeadLetter.objects.filter(rule=honest).count() == 5
        assert rule_usage(store, "victim") == (5, 5)
        assert RuleMetrics.objects.get(rule=honest).actions_failed == 5
        # The attacker's own is kept too, and readable: NUL and the lone surrogate escaped for
        # display, the error of its failing rule stored.
        letter = RuleDeadLetter.objects.get(rule=poisoned)
        assert letter.output == {"s": "a\\u0000b\\ud800c"}
        assert rule_usage(store, "evil") == (2, 1)
        assert RuleMetrics.objects.get(rule=broken).failed == 1

        # The replay sends the body the job sent, byte for byte (and signed as it was).
        (first,) = [c for c in failing.calls if b'"s"' in c["body"]]
        failing.statuses = []
        tenant_letters = rule_services.rule_dead_letters_replay(poisoned)
        assert tenant_letters["delivered"] == 1
        replayed = failing.calls[-1]
        assert replayed["body"] == first["body"] and signature_ok(replayed, SECRET)
        assert json.loads(replayed["body"]) == {"s": "a\u0000b\ud800c"}
    finally:
        failing.close()


def test_counters_and_letters_wait_for_a_database_that_is_away():
    """A flush while the database is away keeps everything (never raises); the next one writes
    it all, and one tenant's refused row does not cost another tenant its own."""
    from spark.rules import store as db
    from spark.rules.bookkeeping import Books, DeadLetter

    acme = tenant_services.tenant_create("acme")
    rule = rule_services.rule_create(tenant=acme, name="r", sql='SELECT * FROM "t/#"')
    connection.close()
    books = Books()
    letter = DeadLetter(
        rule.id, "acme", {"type": "webhook", "secret": "s"}, {"a": "\x00"}, "e\x00", 1
    )
    books.add({rule.id: db.RuleDelta(matched=3, last_error="x\x00y")}, {rule.id: "acme"}, [letter])
    away = db.connect(database_url())
    away.close()
    assert books.flush(away) is False and books.pending
    books.add({rule.id: db.RuleDelta(matched=2)}, {rule.id: "acme"})
    conn = db.connect(database_url())
    try:
        assert books.flush(conn) is True and not books.pending
    finally:
        conn.close()
    metrics = RuleMetrics.objects.get(rule=rule)
    assert metrics.matched == 5 and metrics.last_error == "x\\u0000y"
    stored = RuleDeadLetter.objects.get(rule=rule)
    assert stored.output == {"a": "\\u0000"} and stored.error == "e\\u0000"
    assert "secret" not in stored.action

"""The rules job's batches shared by tenants, without Spark: one tenant's value that Postgres
refuses costs no other tenant its rows (issue 44, point 3; docs/architecture.md, "Batches
shared by tenants"). The values are ones no check lets through today (a NaN where jsonb is
written): what is tested is the last line of defence, the batch written again one row at a
time (`common.stores.isolation`)."""

from __future__ import annotations

import pytest
from django.db import connection

from common.stores import isolation
from spark.rules import store as db
from spark.rules.bookkeeping import Books, DeadLetter
from spark.rules.retry_store import RetryStore, Waiting
from tenants.models import RuleActionRetry, RuleDeadLetter, RuleMetrics
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.spark.conftest import database_url

pytestmark = pytest.mark.django_db(transaction=True)
NAN = float("nan")  # json.dumps writes it as `NaN`, which jsonb refuses


@pytest.fixture
def rules():
    """(attacker's rule, victim's rule)."""
    made = []
    for slug in ("atk", "vic"):
        tenant = tenant_services.tenant_create(slug)
        made.append(rule_services.rule_create(tenant=tenant, name="r", sql='SELECT * FROM "t/#"'))
    connection.close()
    return made


def _waiting(rule, tenant: str, n: int, action: dict | None = None) -> Waiting:
    action = action or {"type": "webhook", "url": "http://h/x"}
    return Waiting(rule.id, tenant, action, f'{{"n": {n}}}', 1_000 + n, 1, topic="t/1")


def test_retry_queue_refuses_only_the_row_refused_alone(rules):
    """The attacker's rows come first: its refused row once raised out of the save, every
    tenant's rows were kept in memory to fail the next save again (and the groups saved
    before it inserted twice). Now the victim's rows and the attacker's good one are kept,
    the bad one is handed back refused, its error saying why."""
    attacker, victim = rules
    bad = _waiting(attacker, "atk", 0, {"type": "webhook", "weight": NAN})
    rows = [bad, _waiting(attacker, "atk", 1), _waiting(victim, "vic", 2)]
    rows.append(_waiting(victim, "vic", 3))
    before = isolation.REFUSED["rule_retries"]
    store = RetryStore(database_url())
    try:
        refused = store.save(rows)
    finally:
        store.close()
    assert refused == [bad]
    assert bad.last_error.startswith("the durable retry queue refused it")
    assert isolation.REFUSED["rule_retries"] == before + 1
    assert sorted(RuleActionRetry.objects.filter(rule=victim).values_list("ts_ms", flat=True)) == [
        1_002,
        1_003,
    ]
    assert list(RuleActionRetry.objects.filter(rule=attacker).values_list("ts_ms", flat=True)) == [
        1_001
    ]


def test_bookkeeping_stores_every_other_letter_and_counter(rules):
    """Dead letters and counters are written per tenant, then row by row: the attacker's
    letter whose output jsonb refuses is stored with a stand-in output, the victim's letters
    and counters all land."""
    attacker, victim = rules
    books = Books()
    letters = [
        DeadLetter(attacker.id, "atk", {"type": "webhook"}, {"x": NAN}, "HTTP 500", 3),
        DeadLetter(attacker.id, "atk", {"type": "webhook"}, {"x": 1}, "HTTP 500", 3),
        DeadLetter(victim.id, "vic", {"type": "webhook"}, {"n": 1}, "HTTP 500", 3),
        DeadLetter(victim.id, "vic", {"type": "webhook"}, {"n": 2}, "HTTP 500", 3),
    ]
    deltas = {attacker.id: db.RuleDelta(matched=1), victim.id: db.RuleDelta(matched=4)}
    books.add(deltas, {attacker.id: "atk", victim.id: "vic"}, letters)
    conn = db.connect(database_url())
    try:
        assert books.flush(conn) is True and not books.pending
    finally:
        conn.close()
    assert books.refused_rows == 1
    outputs = RuleDeadLetter.objects.filter(rule=victim).values_list("output", flat=True)
    assert sorted(o["n"] for o in outputs) == [1, 2]
    theirs = RuleDeadLetter.objects.filter(rule=attacker).values_list("output", flat=True)
    assert sorted(theirs, key=str) == [{"unstorable": '{"x": NaN}'}, {"x": 1}]
    assert RuleMetrics.objects.get(rule=victim).matched == 4
    assert RuleMetrics.objects.get(rule=attacker).matched == 1

"""Dead letters replayed: a webhook receiver that was down while the job ran (connection refused,
so the job dead-lettered every output), then up; `POST /api/v1/rules/{name}/dead-letters/replay`
re-sends them, signed, through the same webhook call; the portal's button does the same; another
tenant cannot replay them."""

from __future__ import annotations

import io
import json
import time

import pyarrow.parquet as pq
import pytest
from django.db import connection
from django.db.models import Sum

from spark.rules.actions import ActionRunner
from spark.rules.backfill import run_backfill
from tenants.billing.services import usage_log_rollup
from tenants.models import RuleDeadLetter, Usage
from tenants.rules import services as rule_services
from tests.api.conftest import acme, attacker  # noqa: F401 (fixtures)
from tests.spark.conftest import Receiver, database_url, message, signature_ok, write_live

pytestmark = pytest.mark.django_db(transaction=True)
SECRET = "whsec-replay-test-secret-1"


def test_dead_letters_replay_once_the_receiver_is_back(
    spark,
    store,
    acme,  # noqa: F811
    attacker,  # noqa: F811
    client,
    monkeypatch,
):
    tenant, api = acme
    monkeypatch.setenv("OBJECT_STORE_URL", f"file://{store.root}")
    down = Receiver()
    url, port = down.url, down.server.server_port
    down.close()  # nothing listens there now: connection refused
    rule = rule_services.rule_create(
        tenant=tenant,
        name="hook",
        sql='SELECT payload.n AS n FROM "t/#"',
        actions=[{"type": "webhook", "url": url, "secret": SECRET}],
    )
    connection.close()
    now = int(time.time() * 1000) - 60_000
    write_live(store, [message("acme", f"t/{n}", {"n": n}, now + n) for n in range(3)])
    runner = ActionRunner(store, attempts=2, backoff=0.01, timeout=1.0)
    try:
        summary = run_backfill(spark, database_url(), store, now - 1000, now + 1000, runner=runner)
    finally:
        runner.close()
    assert summary["dead_letters"] == 3
    assert RuleDeadLetter.objects.filter(rule=rule).count() == 3

    _, evil = attacker
    assert evil.post("/api/v1/rules/hook/dead-letters/replay").status_code == 404
    assert RuleDeadLetter.objects.filter(rule=rule).count() == 3

    still_down = api.post("/api/v1/rules/hook/dead-letters/replay").json()
    assert still_down == {
        "replayed": 3,
        "queued": 0,
        "delivered": 0,
        "failed": 3,
        "orphaned": 0,
        "done_already": 0,
        "remaining": 3,
    }
    letter = RuleDeadLetter.objects.filter(rule=rule).first()
    assert letter.attempts == 2 + 2 and letter.error == "webhook: connection refused"

    up = Receiver(port=port)  # the receiver is back, on the URL the rule names
    try:
        body = api.post("/api/v1/rules/hook/dead-letters/replay").json()
        assert body == {
            "replayed": 3,
            "queued": 0,
            "delivered": 3,
            "failed": 0,
            "orphaned": 0,
            "done_already": 0,
            "remaining": 0,
        }
        calls = up.wait(3, 10)
        assert sorted(json.loads(c["body"])["n"] for c in calls) == [0, 1, 2]
        assert all(signature_ok(c, SECRET) for c in calls)
        assert {c["headers"]["X-Rule-Id"] for c in calls} == {str(rule.id)}
        assert not RuleDeadLetter.objects.filter(rule=rule).exists()

        # The portal's button: one more dead letter, replayed from the rule's page.
        RuleDeadLetter.objects.create(
            rule=rule,
            action={"type": "webhook", "url": url},
            output={"n": 9},
            error="webhook: HTTP 503",
        )
        client.login(username="owner@acme.io", password="pass-w0rd-acme")
        page = client.get("/rules/hook/").content.decode()
        assert "Replay dead letters" in page
        response = client.post("/rules/hook/dead-letters/replay/", follow=True)
        assert "1 of 1 dead letter(s) delivered; 0 remain." in response.content.decode()
        assert json.loads(up.wait(4, 10)[-1]["body"]) == {"n": 9}
    finally:
        up.close()

    # Metered: every replayed call is an action executed (3 failed, 3 delivered, 1 from the
    # portal), in the usage log the bill reads, beside the job's own 3 — and none for the
    # attacker's refused call, nor for the other tenant.
    executed: dict[tuple[str, str], int] = {}
    for key in store.list("usage/"):
        for row in pq.read_table(io.BytesIO(store.get(key))).to_pylist():
            writer = row["writer"]
            bucket = (row["tenant"], writer)
            executed[bucket] = executed.get(bucket, 0) + row["actions_executed"]
    assert executed.get(("acme", "rules-replay")) == 7
    assert executed.get(("acme", "rules-backfill")) == 3
    assert not [k for k in executed if k[0] != "acme"]
    # The portal's charts get them too (the rollup adds every `rules-` segment once).
    usage_log_rollup(store=store)
    total = Usage.objects.filter(tenant=tenant).aggregate(n=Sum("actions_executed"))["n"]
    assert total == 10

"""Dead-letter replay from the attacker's side (issue 29, point 6): 40 replays of 96 letters
each used to make 3,840 outbound POSTs at once. A tenant may now replay 6 times a minute, all
its rules together (a 429 with Retry-After after that, nothing sent), while another tenant's
replay is not held up by it."""

from __future__ import annotations

import pytest

from tenants.models import RuleDeadLetter
from tenants.rules import services as rule_services
from tests.api.conftest import acme, attacker  # noqa: F401 (fixtures)
from tests.spark.conftest import Receiver

pytestmark = pytest.mark.django_db


def test_replays_are_rate_limited_per_tenant(acme, attacker, monkeypatch):  # noqa: F811
    monkeypatch.setenv("WEBHOOK_ALLOW", "127.0.0.1")
    receiver = Receiver(statuses=[503] * 10_000)  # every replay fails: the letters stay
    try:
        hook = {"type": "webhook", "url": receiver.url, "secret": "s" * 32}
        evil, evil_api = attacker
        for index in range(2):  # two rules: the limit is the tenant's, not each rule's
            rule = rule_services.rule_create(
                tenant=evil, name=f"r{index}", sql='SELECT * FROM "#"', actions=[hook]
            )
            RuleDeadLetter.objects.bulk_create(
                RuleDeadLetter(
                    rule=rule,
                    action={"type": "webhook", "url": receiver.url},
                    output={"n": n},
                    error="webhook: HTTP 503",
                )
                for n in range(16)
            )
        codes = []
        for attempt in range(40):
            response = evil_api.post(f"/api/v1/rules/r{attempt % 2}/dead-letters/replay")
            codes.append(response.status_code)
            if response.status_code == 429:
                assert int(response["Retry-After"]) > 0
                assert "too often" in response.json()["error"]["message"]
        assert codes.count(200) == 6 and codes.count(429) == 34, codes
        sent = len(receiver.calls)
        assert sent <= 6 * 16 * 2, sent  # 6 replays x 16 letters x 2 attempts, not 40 x 16 x 2

        # Another tenant replays meanwhile, unaffected by the first one's limit.
        tenant, api = acme
        victim = rule_services.rule_create(
            tenant=tenant, name="v", sql='SELECT * FROM "#"', actions=[hook]
        )
        RuleDeadLetter.objects.create(
            rule=victim,
            action={"type": "webhook", "url": receiver.url},
            output={"n": 1},
            error="webhook: HTTP 503",
        )
        receiver.statuses = []
        assert api.post("/api/v1/rules/v/dead-letters/replay").json()["delivered"] == 1
    finally:
        receiver.close()


def test_a_dead_letter_error_names_no_internal_address(acme, monkeypatch):  # noqa: F811
    """A refused destination leaves an error with no address in it, whatever the URL names."""
    monkeypatch.delenv("WEBHOOK_ALLOW", raising=False)
    monkeypatch.delenv("WEBHOOK_ALLOW_PRIVATE", raising=False)
    tenant, api = acme
    rule = rule_services.rule_create(
        tenant=tenant,
        name="probe",
        sql='SELECT * FROM "#"',
        actions=[{"type": "webhook", "url": "http://2130706433:5432/", "secret": "s" * 32}],
    )
    RuleDeadLetter.objects.create(
        rule=rule,
        action={"type": "webhook", "url": "http://2130706433:5432/"},
        output={},
        error="webhook: HTTP 503",
    )
    body = api.post("/api/v1/rules/probe/dead-letters/replay").json()
    assert body["failed"] == 1
    (letter,) = api.get("/api/v1/rules/probe/dead-letters").json()["results"]
    assert "no public address" in letter["error"] and "127.0.0.1" not in letter["error"]

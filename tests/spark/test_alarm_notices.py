"""The alarms' notifications outbox as the live job sends it (`spark.rules.alarm_notices`), on
the real tables: a claimed row is sent once and marked, a failing target is tried again later
with its error in words and given up after its attempts, an email is left to the control plane,
a target removed from the definition fails in words. The runner is a stand-in: the end-to-end
test (test_alarms_live.py) sends real webhooks and republishes."""

from __future__ import annotations

import pytest
from django.db import connection
from django.utils import timezone

from spark.rules import alarm_notices
from spark.rules import store as db
from spark.rules.actions import Outcome
from spark.rules.presence import ALARM_NOTIFIERS, Presence
from tenants.models import AlarmDefinition, AlarmNotification, AlarmTransition
from tenants.tenant import services as tenant_services
from tests.spark.conftest import database_url

pytestmark = pytest.mark.django_db(transaction=True)


class Runner:
    def __init__(self, failing: set[str] = frozenset()) -> None:
        self.failing, self.sent = failing, []

    def run(self, jobs):
        self.sent += jobs
        return [
            Outcome(j, j.action.get("url", j.action.get("topic")) not in self.failing, "webhook: HTTP 500")
            for j in jobs
        ]  # fmt: skip


def _presence() -> Presence:
    return Presence(database_url(), ALARM_NOTIFIERS)


def _outbox():
    tenant = tenant_services.tenant_create("acme")
    targets = [
        {"kind": "webhook", "target": "http://127.0.0.1:9/ok", "secret": "s1", "on": ["raise"]},
        {"kind": "webhook", "target": "http://127.0.0.1:9/down", "secret": "s2", "on": ["raise"]},
        {"kind": "email", "target": "ops@acme.io", "on": ["raise"]},
    ]
    definition = AlarmDefinition.objects.create(
        tenant=tenant, name="hot", source="plant/+/temp", raise_condition="payload.temp > 90",
        notifications=targets, enabled=True,
    )  # fmt: skip
    transition = AlarmTransition.objects.create(
        tenant=tenant, definition=definition, key="pump", event="raise", before="pending",
        after="active", at=timezone.now(), value=95, cause="condition", message_id="m1",
    )  # fmt: skip
    for index, target in enumerate(targets):
        AlarmNotification.objects.create(
            tenant=tenant, transition=transition, kind=target["kind"], index=index,
            target=target["target"],
        )  # fmt: skip
    connection.close()
    return definition


def test_sent_once_failing_retried_then_given_up_and_emails_left_alone():
    _outbox()
    runner = Runner(failing={"http://127.0.0.1:9/down"})
    notifier = alarm_notices.AlarmNotifier(runner, _presence())
    with db.connect(database_url()) as conn:
        assert notifier.send_due(conn) == 2  # the two webhooks; the email is not the job's
        assert notifier.send_due(conn) == 0  # sent, or claimed and not due yet
        document = runner.sent[0].output
        assert {k: document[k] for k in ("alarm", "key", "event", "state", "value")} == {
            "alarm": "hot",
            "key": "pump",
            "event": "raise",
            "state": "active",
            "value": 95,
        }
        ok, down, email = AlarmNotification.objects.order_by("index")
        assert (ok.state, ok.attempts, ok.sent_at is not None) == ("sent", 1, True)
        assert (down.state, down.attempts, down.last_error) == ("pending", 1, "webhook: HTTP 500")
        assert down.next_at > timezone.now()  # tried again later
        assert (email.state, email.attempts) == ("pending", 0)
        for _ in range(alarm_notices.ATTEMPTS):
            AlarmNotification.objects.filter(id=down.id).update(next_at=timezone.now())
            connection.close()
            notifier.send_due(conn)
        down.refresh_from_db()
        assert (down.state, down.attempts) == ("failed", alarm_notices.ATTEMPTS)
        assert len([j for j in runner.sent if j.action["url"].endswith("/ok")]) == 1


def test_a_target_removed_before_it_was_sent_fails_in_words():
    definition = _outbox()
    AlarmDefinition.objects.filter(id=definition.id).update(notifications=[])
    connection.close()
    with db.connect(database_url()) as conn:
        alarm_notices.AlarmNotifier(Runner(), _presence()).send_due(conn)
    states = set(
        AlarmNotification.objects.filter(kind="webhook").values_list("state", "last_error")
    )
    assert states == {
        ("failed", "the alarm's notification was removed or changed before it was sent")
    }


_CLAIMS_AND_HANGS = """
import sys, time
from spark.rules import alarm_notices, store as db
from spark.rules.presence import ALARM_NOTIFIERS, Presence
presence = Presence(sys.argv[1], ALARM_NOTIFIERS)
presence.hold()
with db.connect(sys.argv[1]) as conn:
    claim = (alarm_notices.LEASE, presence.id, list(alarm_notices.SENT_HERE), 100)
    print(len(conn.execute(alarm_notices._CLAIM, claim).fetchall()), flush=True)
    time.sleep(120)  # sending, as far as anyone can tell: killed here
"""


def test_a_killed_senders_claims_are_sent_at_once_by_the_next():
    """The live job killed -9 between claiming notifications and marking them: while it lives
    another sender leaves them alone; once it is gone the next one sends them at once, not a
    minute later (the claim's lease)."""
    import subprocess
    import sys

    _outbox()
    dsn = database_url()
    first = subprocess.Popen([sys.executable, "-c", _CLAIMS_AND_HANGS, dsn], stdout=subprocess.PIPE,
                             text=True)  # fmt: skip
    runner = Runner()
    notifier = alarm_notices.AlarmNotifier(runner, _presence())
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "2"
        with db.connect(dsn) as conn:
            assert notifier.send_due(conn) == 0  # both out with a living sender
            assert notifier.take_back_orphans(conn) == 0
            first.kill()
            first.wait(10)
            assert notifier.take_back_orphans(conn) == 2
            assert notifier.send_due(conn) == 2
    finally:
        notifier.presence.close()
        if first.poll() is None:
            first.kill()
    sent = AlarmNotification.objects.filter(kind="webhook").values_list("state", "claimed_by")
    assert set(sent) == {("sent", None)} and len(runner.sent) == 2

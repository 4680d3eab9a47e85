"""The alarms' notifications outbox from the control plane's side (issue 46), on real Postgres
with Django's locmem email backend: an acknowledgement writes a notification row for each
target whose `on` names it (every kind; the live job sends the webhooks and republishes); the
email task sends the due rows once and marks them sent, tries a refused address again later
with its error in words while the other addresses go, and gives up after its attempts; a
target taken out of the definition is not mailed; the history (API and portal) shows each
transition's notifications, in a fixed number of queries, and never another tenant's rows."""

from __future__ import annotations

import smtplib
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tenants.alarms import emails
from tenants.alarms.services import alarm_acknowledge
from tenants.models import AlarmDefinition, AlarmNotification, AlarmTransition
from tenants.tasks import alarm_emails
from tests.api.conftest import acme, attacker  # noqa: F401 (fixtures)
from tests.control_plane.test_alarms_api import state_row, transition_row

pytestmark = pytest.mark.django_db

TARGETS = [
    {"kind": "email", "target": "ops@acme.io", "on": ["raise", "acknowledge", "clear"]},
    {"kind": "webhook", "target": "https://hooks.acme.io/a", "on": ["acknowledge"]},
    {"kind": "email", "target": "boss@acme.io", "on": ["raise"]},
    {"kind": "republish", "target": "alarms/acked", "on": ["acknowledge", "clear"]},
    {"kind": "email", "target": "night@acme.io", "on": ["acknowledge"]},
]


def _definition(tenant, name="hot", notifications=TARGETS, **fields):
    return AlarmDefinition.objects.create(
        tenant=tenant,
        name=name,
        source="sensors/+/temp",
        raise_condition="payload.temp > 90",
        severity="major",
        notifications=notifications,
        **fields,
    )


def _notice(transition, index, target, *, kind="email", **fields):
    """A row as the live job writes it with a transition."""
    fields.setdefault("tenant_id", transition.tenant_id)
    return AlarmNotification.objects.create(
        transition=transition, kind=kind, index=index, target=target, **fields
    )


def _raised(tenant, definition=None, key="pump"):
    definition = definition or _definition(tenant)
    state = state_row(tenant, definition, key, "active", ago=3, value=93.5, cause="condition")
    raised = transition_row(state, "raise", "normal", "active", ago=3, message_id="seg-1:7")
    AlarmTransition.objects.filter(id=raised.id).update(cause="condition")
    raised.cause = "condition"
    return state, raised


def test_an_acknowledgement_writes_a_row_per_target_that_asks_for_it(acme):  # noqa: F811
    tenant, _ = acme
    state, _ = _raised(tenant)
    alarm_acknowledge(state, by="owner@acme.io", note="on it")
    [ack] = AlarmTransition.objects.filter(event="acknowledge")
    rows = AlarmNotification.objects.filter(transition=ack).order_by("index")
    assert [(n.index, n.kind, n.target, n.state, n.attempts) for n in rows] == [
        (0, "email", "ops@acme.io", "pending", 0),
        (1, "webhook", "https://hooks.acme.io/a", "pending", 0),
        (3, "republish", "alarms/acked", "pending", 0),
        (4, "email", "night@acme.io", "pending", 0),
    ]  # boss@ hears of raises only
    assert {n.tenant_id for n in rows} == {tenant.id}
    assert all(n.next_at <= timezone.now() for n in rows)  # due at once


def test_an_acknowledgement_of_an_alarm_without_targets_writes_none(acme):  # noqa: F811
    tenant, _ = acme
    state, _ = _raised(tenant, _definition(tenant, "quiet", notifications=[]))
    alarm_acknowledge(state, by="owner@acme.io")
    assert not AlarmNotification.objects.exists()


def test_the_task_sends_each_due_email_once_and_marks_it_sent(acme, mailoutbox):  # noqa: F811
    tenant, _ = acme
    state, raised = _raised(tenant)
    for_ops = _notice(raised, 0, "ops@acme.io")
    for_boss = _notice(raised, 2, "boss@acme.io")
    hook = _notice(raised, 1, "https://hooks.acme.io/a", kind="webhook")
    later = _notice(raised, 0, "ops@acme.io", next_at=timezone.now() + timedelta(minutes=5))

    assert alarm_emails() == {"claimed": 2, "sent": 2, "unsent": 0}
    assert sorted(m.to[0] for m in mailoutbox) == ["boss@acme.io", "ops@acme.io"]
    message = next(m for m in mailoutbox if m.to == ["ops@acme.io"])
    assert message.subject == "[major] Alarm hot raised for pump"
    body = message.body
    for words in ("Key:      pump", "State:    active", "Value:    93.5", "Cause:    condition"):
        assert words in body
    assert f"Time:     {raised.at.strftime('%Y-%m-%d %H:%M:%S')} UTC" in body
    assert "Message:  seg-1:7" in body and "Acknowledged by" not in body
    assert f"/alarms/{state.id}/history/" in body
    for notice in (for_ops, for_boss):
        notice.refresh_from_db()
        assert (notice.state, notice.attempts, notice.last_error) == ("sent", 1, "")
        assert notice.sent_at is not None
    # Sent once: the next runs find nothing due; the webhook and the later row stay as they were.
    assert emails.send_due() == {"claimed": 0, "sent": 0, "unsent": 0}
    assert emails.send_due(now=timezone.now() + timedelta(hours=1))["claimed"] == 1  # `later`
    assert len(mailoutbox) == 3
    hook.refresh_from_db()
    later.refresh_from_db()
    assert (hook.state, hook.attempts) == ("pending", 0)
    assert later.state == "sent"


def test_an_acknowledgement_email_says_who_and_its_note(acme, mailoutbox):  # noqa: F811
    tenant, _ = acme
    state, _ = _raised(tenant)
    alarm_acknowledge(state, by="owner@acme.io", note="valve closed")
    # ops@ and night@; the webhook and the republish are the live job's to send
    assert emails.send_due()["sent"] == 2
    assert sorted(m.to[0] for m in mailoutbox) == ["night@acme.io", "ops@acme.io"]
    message = mailoutbox[0]
    assert message.subject == "[major] Alarm hot acknowledged for pump"
    assert "Acknowledged by: owner@acme.io" in message.body
    assert "Note:     valve closed" in message.body
    assert "State:    acknowledged" in message.body
    assert AlarmNotification.objects.filter(kind="email", state="sent").count() == 2
    assert AlarmNotification.objects.filter(kind__in=["webhook", "republish"], state="pending").count() == 2  # fmt: skip


def test_a_refused_address_is_tried_again_then_failed_and_never_stops_the_others(
    acme,  # noqa: F811
    mailoutbox,
    monkeypatch,
):
    tenant, _ = acme
    _, raised = _raised(tenant)
    refused = _notice(raised, 0, "ops@acme.io")
    fine = _notice(raised, 2, "boss@acme.io")
    real = emails.send_mail

    def send_mail(subject, body, sender, to):
        if to == ["ops@acme.io"]:
            raise smtplib.SMTPRecipientsRefused({"ops@acme.io": (550, b"mailbox unavailable")})
        return real(subject, body, sender, to)

    monkeypatch.setattr(emails, "send_mail", send_mail)
    now = timezone.now()
    assert emails.send_due(now=now) == {"claimed": 2, "sent": 1, "unsent": 1}
    assert [m.to for m in mailoutbox] == [["boss@acme.io"]]
    fine.refresh_from_db()
    refused.refresh_from_db()
    assert fine.state == "sent"
    assert (refused.state, refused.attempts, refused.sent_at) == ("pending", 1, None)
    assert refused.last_error.startswith("SMTPRecipientsRefused: ")
    assert "mailbox unavailable" in refused.last_error
    assert refused.next_at == now + timedelta(seconds=1)  # 2 ** 0: then doubling
    # Not before its time; then each later attempt waits twice as long, at most 5 minutes.
    assert emails.send_due(now=now + timedelta(milliseconds=500))["claimed"] == 0
    waits = []
    for attempt in range(2, emails.ATTEMPTS + 1):
        at = refused.next_at
        assert emails.send_due(now=at) == {"claimed": 1, "sent": 0, "unsent": 1}
        refused.refresh_from_db()
        assert refused.attempts == attempt
        waits.append((refused.next_at - at).total_seconds())
    assert waits[:-1] == [2, 4, 8, 16, 32, 64]
    assert refused.state == "failed" and refused.sent_at is None
    assert "mailbox unavailable" in refused.last_error
    # Given up: no later run takes it again.
    assert emails.send_due(now=now + timedelta(days=1))["claimed"] == 0
    assert len(mailoutbox) == 1


def test_a_claimed_row_is_not_taken_again_within_its_lease(acme, mailoutbox):  # noqa: F811
    tenant, _ = acme
    _, raised = _raised(tenant)
    notice = _notice(raised, 0, "ops@acme.io")
    now = timezone.now()
    assert emails.claim(now=now) == [notice.id]  # a worker took it and died before sending
    assert emails.send_due(now=now + timedelta(seconds=30))["claimed"] == 0
    assert emails.send_due(now=now + emails.LEASE)["sent"] == 1
    assert len(mailoutbox) == 1


def test_a_target_taken_out_of_the_definition_is_not_mailed(acme, mailoutbox):  # noqa: F811
    tenant, _ = acme
    _, raised = _raised(tenant)
    gone = _notice(raised, 2, "boss@acme.io")
    moved = _notice(raised, 0, "ops@acme.io")
    definition = raised.definition
    definition.notifications = [dict(TARGETS[0], target="ops2@acme.io")]
    definition.save()
    assert emails.send_due() == {"claimed": 2, "sent": 0, "unsent": 2}
    assert mailoutbox == []
    for notice in (gone, moved):
        notice.refresh_from_db()
        assert notice.state == "failed" and "removed or changed" in notice.last_error


def test_the_history_shows_each_transitions_notifications_and_no_other_tenants(
    acme,  # noqa: F811
    attacker,  # noqa: F811
    client,
):
    tenant, api = acme
    evil, evil_api = attacker
    state, raised = _raised(tenant)
    sent = _notice(raised, 0, "ops@acme.io", state="sent", attempts=1, sent_at=timezone.now())
    _notice(raised, 1, "https://hooks.acme.io/a", kind="webhook", attempts=3,
            last_error="HTTP 503 from the receiver")  # fmt: skip
    alarm_acknowledge(state, by="owner@acme.io")
    # A row of another tenant's pointing at acme's transition (never written so; it must not
    # show), and the other tenant's own alarm with the same key and a row of its own.
    _notice(raised, 2, "spy@evil.io", tenant_id=evil.id)
    evil_state, evil_raised = _raised(evil, _definition(evil, "hot"))
    _notice(evil_raised, 0, "ops@evil.io")

    history = api.get(f"/api/v1/alarms/states/{state.id}/history").json()["results"]
    assert [h["event"] for h in history] == ["acknowledge", "raise"]
    assert [n["target"] for n in history[0]["notifications"]] == [
        "ops@acme.io", "https://hooks.acme.io/a", "alarms/acked", "night@acme.io",
    ]  # fmt: skip
    assert history[1]["notifications"] == [
        {
            "kind": "email",
            "target": "ops@acme.io",
            "state": "sent",
            "attempts": 1,
            "last_error": "",
            "sent_at": sent.sent_at.isoformat().replace("+00:00", "Z"),
        },
        {
            "kind": "webhook",
            "target": "https://hooks.acme.io/a",
            "state": "pending",
            "attempts": 3,
            "last_error": "HTTP 503 from the receiver",
            "sent_at": None,
        },
    ]
    for path in ("/api/v1/alarms/history?device=pump", "/api/v1/alarms/hot/states/pump/history"):
        rows = api.get(path).json()["results"]
        targets = {n["target"] for h in rows for n in h["notifications"]}
        assert targets and not any("evil" in t for t in targets), path
    theirs = evil_api.get(f"/api/v1/alarms/states/{evil_state.id}/history").json()["results"]
    assert [n["target"] for h in theirs for n in h["notifications"]] == ["ops@evil.io"]

    # One query for the page's notifications, not one per transition.
    for i in range(6):
        more = transition_row(state, "renotify", "active", "active", ago=2)
        _notice(more, 0, f"more{i}@acme.io")
    with CaptureQueriesContext(connection) as few:
        assert len(api.get(f"/api/v1/alarms/states/{state.id}/history").json()["results"]) == 8
    for i in range(6):
        _notice(transition_row(state, "renotify", "active", "active", ago=2), 0, f"x{i}@acme.io")
    with CaptureQueriesContext(connection) as many:
        assert len(api.get(f"/api/v1/alarms/states/{state.id}/history").json()["results"]) == 14
    assert len(many.captured_queries) == len(few.captured_queries)

    # The portal's page of the key's history shows them too.
    client.force_login(tenant.memberships.get().user)
    html = client.get(f"/alarms/{state.id}/history/").content.decode()
    assert "Notified" in html and "HTTP 503 from the receiver" in html
    assert 'data-kind="webhook" data-state="pending"' in html and "ops@acme.io" in html
    assert "evil" not in html
    with CaptureQueriesContext(connection) as page:
        client.get(f"/alarms/{state.id}/history/")
    _notice(transition_row(state, "renotify", "active", "active", ago=2), 0, "y@acme.io")
    with CaptureQueriesContext(connection) as bigger:
        client.get(f"/alarms/{state.id}/history/")
    assert len(bigger.captured_queries) == len(page.captured_queries)


def test_the_beat_sends_alarm_emails_every_few_seconds():
    from django.conf import settings

    entry = settings.CELERY_BEAT_SCHEDULE["alarm-emails"]
    assert entry["task"] == "tenants.tasks.alarm_emails"
    assert entry["schedule"] == timedelta(seconds=5)

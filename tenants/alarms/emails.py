"""The alarms' emails, sent from their outbox (`tenants_alarmnotification`, kind `email`) by a
Celery task every `ALARM_EMAIL_SECONDS` (5), at least once.

The rows are written with their transition, in its transaction: by the live rules job (raise,
re-notification, clear) and by `services.alarm_acknowledge`. Sent the way the job sends the
webhooks and republishes (`spark/rules/alarm_notices.py`): the due rows are *claimed* — their
`next_at` moved a minute on, in one short statement with `FOR UPDATE SKIP LOCKED`, so two workers
never both take one and no transaction is held while a mail goes out — then each is sent on its
own with Django's `send_mail` (one refused address never stops the others), then marked `sent`,
or tried again later (doubling, at most 5 minutes) and `failed` after `ATTEMPTS`, the error in
words in `last_error`. A row whose target left the definition (removed, or changed to another
address) is `failed` at once, not sent to an address no longer asked for.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import connection
from django.db.models import Case, F, Value, When
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from common.alarms import machine
from tenants.models import AlarmNotification, AlarmState

log = logging.getLogger(__name__)

ATTEMPTS = 8  # as the live job's notifications
LEASE = timedelta(seconds=60)  # a claimed row is not taken again before (a worker that died)
BATCH = 100
MAX_ROUNDS = 10  # batches per task run; the next beat takes the rest
MAX_BACKOFF_SECONDS = 300
REMOVED = "the alarm's notification was removed or changed before it was sent"

# What a subject says of each event.
EVENT_WORDS = {
    machine.RAISE: "raised",
    machine.ACKNOWLEDGE: "acknowledged",
    machine.CLEAR: "cleared",
    machine.RENOTIFY: "re-notified",
}

_TABLE = AlarmNotification._meta.db_table
_CLAIM = f"""
UPDATE {_TABLE} SET next_at = %s
 WHERE id IN (SELECT id FROM {_TABLE}
               WHERE state = 'pending' AND kind = 'email' AND next_at <= %s
               ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING id
"""


@dataclass(frozen=True, slots=True)
class Email:
    subject: str
    body: str
    to: str


def claim(*, now: datetime, limit: int = BATCH) -> list[int]:
    """The ids of due email rows, taken for `LEASE` (one statement: its own transaction when
    not inside one)."""
    with connection.cursor() as cur:
        cur.execute(_CLAIM, [now + LEASE, now, limit])
        return sorted(row[0] for row in cur.fetchall())


def _when(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _history_link(notice: AlarmNotification) -> str | None:
    """The portal's page of the key's history, when the key still has a state."""
    transition = notice.transition
    state_id = (
        AlarmState.objects.filter(
            tenant_id=notice.tenant_id, definition_id=transition.definition_id, key=transition.key
        )
        .values_list("id", flat=True)
        .first()
    )
    base = getattr(settings, "PORTAL_URL", "")
    if state_id is None or not base:
        return None
    try:
        path = reverse("portal:alarm-history", kwargs={"state_id": state_id})
    except NoReverseMatch:
        return None
    return base.rstrip("/") + path


def email_of(notice: AlarmNotification) -> Email:
    """The mail a notification row sends: the subject says the severity, the alarm, what
    happened and to which key; the body the rest, in plain text."""
    transition = notice.transition
    definition = transition.definition
    happened = EVENT_WORDS.get(transition.event, transition.event)
    subject = f"[{definition.severity}] Alarm {definition.name} {happened} for {transition.key}"
    lines = [
        f"The alarm {definition.name} was {happened} for {transition.key}.",
        "",
        f"Alarm:    {definition.name} (severity {definition.severity})",
        f"Tenant:   {notice.tenant.slug}",
        f"Key:      {transition.key}",
        f"Event:    {transition.event} ({transition.before} -> {transition.after})",
        f"State:    {transition.after}",
        f"Value:    {json.dumps(transition.value, ensure_ascii=False)}",
        f"Time:     {_when(transition.at)}",
        f"Cause:    {transition.cause or '-'}",
    ]
    if transition.message_id:
        lines.append(f"Message:  {transition.message_id}")
    if transition.event == machine.ACKNOWLEDGE:
        lines.append(f"Acknowledged by: {transition.by or '-'}")
        if transition.note:
            lines.append(f"Note:     {transition.note}")
    link = _history_link(notice)
    if link:
        lines += ["", f"The key's history: {link}"]
    if definition.description:
        lines += ["", definition.description]
    lines += [
        "",
        f"You receive this because the alarm {definition.name} notifies {notice.target} "
        f"on {transition.event}.",
    ]
    return Email(subject=subject, body="\n".join(lines) + "\n", to=notice.target)


def _still_asked(notice: AlarmNotification) -> bool:
    """Whether the definition still has this email target at the row's place."""
    targets = notice.transition.definition.notifications
    if not isinstance(targets, list) or notice.index >= len(targets):
        return False
    target = targets[notice.index]
    return (
        isinstance(target, dict)
        and target.get("kind") == "email"
        and target.get("target") == notice.target
    )


def _mark_sent(notice_id: int, now: datetime) -> None:
    AlarmNotification.objects.filter(id=notice_id).update(
        state=AlarmNotification.State.SENT, sent_at=now, attempts=F("attempts") + 1, last_error=""
    )


def _mark_again(notice_id: int, error: str, *, delay: timedelta, now: datetime, most: int) -> None:
    """One more attempt that failed: tried again after `delay`, or `failed` at `most`."""
    AlarmNotification.objects.filter(id=notice_id).update(
        attempts=F("attempts") + 1,
        last_error=error[:500],
        next_at=now + delay,
        state=Case(
            When(attempts__gte=most - 1, then=Value(AlarmNotification.State.FAILED)),
            default=Value(AlarmNotification.State.PENDING),
        ),
    )


def send_one(notice: AlarmNotification, *, now: datetime) -> bool:
    """Send one claimed row and mark it; True when it was sent. Never raises for the mail."""
    if not _still_asked(notice):
        _mark_again(notice.id, REMOVED, delay=timedelta(0), now=now, most=0)
        return False
    try:
        email = email_of(notice)
        send_mail(email.subject, email.body, None, [email.to])
    except Exception as exc:  # one address's failure is its row's, never the others'
        error = f"{type(exc).__name__}: {exc}"
        log.warning("alarm email %s to %s not sent: %s", notice.id, notice.target, error)
        delay = timedelta(seconds=min(MAX_BACKOFF_SECONDS, 2**notice.attempts))
        _mark_again(notice.id, error, delay=delay, now=now, most=ATTEMPTS)
        return False
    _mark_sent(notice.id, timezone.now())
    return True


def send_due(*, now: datetime | None = None) -> dict[str, int]:
    """Claim and send the due email rows, batch after batch (at most `MAX_ROUNDS`). Returns
    counts: claimed, sent, not sent (tried again later or failed)."""
    summary = {"claimed": 0, "sent": 0, "unsent": 0}
    for _ in range(MAX_ROUNDS):
        at = now or timezone.now()
        claimed = claim(now=at)
        if not claimed:
            break
        summary["claimed"] += len(claimed)
        rows: dict[int, Any] = AlarmNotification.objects.select_related(
            "tenant", "transition", "transition__definition"
        ).in_bulk(claimed)
        for notice_id in claimed:
            notice = rows.get(notice_id)
            if notice is None:  # its alarm was deleted meanwhile
                continue
            sent = send_one(notice, now=now or timezone.now())
            summary["sent" if sent else "unsent"] += 1
        if len(claimed) < BATCH:
            break
    return summary

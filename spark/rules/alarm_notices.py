"""The alarms' webhooks and republishes, sent from their outbox (`tenants_alarmnotification`) by
the live rules job, at least once.

The keeper (`alarms.py`) writes a notification row per target with each transition, in the
transaction that writes the transition, so none is lost to a crash. Here, every half second, the
due rows are *claimed* — their `next_at` moved a minute on and the sender named (`claimed_by`,
its `presence.Presence`), in one short statement, so two jobs never both take one and none is
held while it is sent; a job killed mid-send leaves its claims to the next sender, which takes
them back at its start (then every `ORPHANS_EVERY`), not after the minute — then sent with the rules' action runner
(a webhook signed with the target's secret as a rule's is, a republish as the tenant's `$rules-`
identity), then marked `sent`, or tried again later (doubling, at most 5 minutes) and `failed`
after `ATTEMPTS`, the error in words in `last_error`. Emails are the control plane's
(`tenants.alarms.emails`). What a notification carries: `{tenant, alarm, key, event, state,
before, at, value, cause, severity, message_id}`; a republish's topic may use `${key}`,
`${alarm}`, … (the rules' templates); an acknowledgement's also `by` and `note`. A row whose
target was removed or changed since is not sent (failed, in words), as the emails do; a
suspended tenant's wait.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg

from common.contracts import tables
from common.security import sealed
from spark.rules.actions import ActionRunner, Job, Outcome
from spark.rules.presence import ORPHANED, Presence

log = logging.getLogger(__name__)

ATTEMPTS = 8
LEASE = timedelta(seconds=60)  # a claimed row is not taken again before (a sender stuck)
ORPHANS_EVERY = 5.0  # seconds between looks for claims whose sender is gone
BATCH = 100
SENT_HERE = ("webhook", "republish")

_CLAIM = f"""
UPDATE {tables.ALARM_NOTIFICATION} SET next_at = now() + %s, claimed_by = %s
 WHERE id IN (SELECT id FROM {tables.ALARM_NOTIFICATION}
               WHERE state = 'pending' AND kind = ANY(%s) AND next_at <= now()
                 AND tenant_id IN (SELECT id FROM {tables.TENANT} WHERE status = 'active')
               ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING id
"""
_DETAILS = f"""
SELECT n.id, n.kind, n.index, n.attempts, t.key, t.event, t.before, t.after, t.at, t.value,
       t.cause, t.message_id, d.id, d.name, d.severity, d.notifications, te.slug, n.target,
       t.by, t.note
  FROM {tables.ALARM_NOTIFICATION} n
  JOIN {tables.ALARM_TRANSITION} t ON t.id = n.transition_id
  JOIN {tables.ALARM_DEFINITION} d ON d.id = t.definition_id
  JOIN {tables.TENANT} te ON te.id = n.tenant_id
 WHERE n.id = ANY(%s)
 ORDER BY n.id
"""
_SENT = f"""
UPDATE {tables.ALARM_NOTIFICATION} SET state = 'sent', sent_at = now(), attempts = attempts + 1,
       last_error = '', claimed_by = NULL WHERE id = %s
"""
_AGAIN = f"""
UPDATE {tables.ALARM_NOTIFICATION}
   SET attempts = attempts + 1, last_error = %s, next_at = now() + %s, claimed_by = NULL,
       state = CASE WHEN attempts + 1 >= %s THEN 'failed' ELSE 'pending' END
 WHERE id = %s
"""

# A gone sender's claims: due again now (sent at least once: it may have gone out already).
_ORPHANS = f"""
UPDATE {tables.ALARM_NOTIFICATION} SET next_at = now(), claimed_by = NULL
 WHERE state = 'pending' AND {ORPHANED}
"""


def _action(kind: str, target: dict[str, Any]) -> dict[str, Any]:
    """The target as the rules' action runner takes it (a webhook's secret opened)."""
    if kind == "webhook":
        [opened] = sealed.open_actions(
            [{"type": "webhook", "url": target.get("target"), "secret": target.get("secret")}]
        )
        return dict(opened)
    return {"type": "republish", "topic": target.get("target"), "qos": 1}


def _document(row: Sequence[Any]) -> dict[str, Any]:
    (_, _, _, _, key, event, before, after, at, value, cause, message_id, _, name, severity, _,
     tenant, _, by, note) = row  # fmt: skip
    when: datetime = at
    extra = {"by": by, "note": note} if event == "acknowledge" else {}
    return {
        "tenant": tenant,
        "alarm": name,
        "key": key,
        "event": event,
        "state": after,
        "before": before,
        "at": when.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "value": value,
        "cause": cause,
        "severity": severity,
        "message_id": message_id,
        **extra,
    }


def jobs_of(rows: Sequence[Sequence[Any]]) -> tuple[dict[int, Job], dict[int, str]]:
    """A runner's job per claimed row (by the row's id), and the rows that cannot be sent
    (their target gone)."""
    jobs: dict[int, Job] = {}
    broken: dict[int, str] = {}
    for row in rows:
        notice_id, kind, index, definition_id, name, notifications = (
            row[0], row[1], row[2], row[12], row[13], row[15],
        )  # fmt: skip
        targets = json.loads(notifications) if isinstance(notifications, str) else notifications
        target = targets[index] if isinstance(targets, list) and index < len(targets) else None
        if not isinstance(target, dict) or (target.get("kind"), target.get("target")) != (
            kind,
            row[17],
        ):
            broken[notice_id] = "the alarm's notification was removed or changed before it was sent"
            continue
        document = _document(row)
        at_ms = int(row[8].timestamp() * 1000)
        jobs[notice_id] = Job(
            -definition_id,
            document["tenant"],
            f"$rules-alarm{definition_id}-",
            _action(kind, target),
            document,
            at_ms,
            rule_name=f"alarm {name}",
            key=None,
        )
    return jobs, broken


class AlarmNotifier:
    """Sends the outbox's due webhooks and republishes (see the module)."""

    def __init__(self, runner: ActionRunner, presence: Presence) -> None:
        self.runner, self.presence = runner, presence
        self.sent = self.failed = 0
        self._looked = float("-inf")

    def take_back_orphans(self, conn: psycopg.Connection[Any]) -> int:
        """Make due again the claims of senders whose process ended; how many."""
        self.presence.hold(check=True)
        taken = conn.execute(_ORPHANS, self.presence.params()).rowcount
        self._looked = time.monotonic()
        if taken:
            log.warning("alarms: %d notifications claimed by a sender now gone sent again", taken)
        return taken

    def send_due(self, conn: psycopg.Connection[Any]) -> int:
        """One round: claim, send, mark. Returns how many were claimed."""
        if time.monotonic() - self._looked >= ORPHANS_EVERY:
            self.take_back_orphans(conn)
        self.presence.hold()
        claim = (LEASE, self.presence.id, list(SENT_HERE), BATCH)
        claimed = [r[0] for r in conn.execute(_CLAIM, claim).fetchall()]
        if not claimed:
            return 0
        rows = conn.execute(_DETAILS, (claimed,)).fetchall()
        jobs, broken = jobs_of(rows)
        outcomes: list[Outcome] = self.runner.run(list(jobs.values())) if jobs else []
        notice_of = {id(job): notice_id for notice_id, job in jobs.items()}
        attempts = {row[0]: row[3] for row in rows}
        with conn.transaction():
            for notice_id, error in broken.items():
                conn.execute(_AGAIN, (error, timedelta(0), 0, notice_id))
            for outcome in outcomes:
                notice_id = notice_of[id(outcome.job)]
                if outcome.ok:
                    conn.execute(_SENT, (notice_id,))
                    self.sent += 1
                    continue
                delay = timedelta(seconds=min(300, 2 ** attempts.get(notice_id, 0)))
                conn.execute(_AGAIN, (outcome.error[:500], delay, ATTEMPTS, notice_id))
                self.failed += 1
        return len(claimed)

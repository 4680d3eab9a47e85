"""Writes of a tenant's rules: create, update, delete (each announced to the broker),
the dry run, dead letters replayed or cleared, webhook secrets resealed."""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from common.contracts.notifications import ChangeKind
from common.contracts.rule_actions import RuleActionError, normalize_actions
from common.rules import Budget, RuleRuntimeError, RuleSyntaxError, default_budget, dry_run
from common.stores.postgres_text import storable_text, utf8_value
from tenants.models import (
    Rule,
    RuleActionLedger,
    RuleDeadLetter,
    SinkOutbox,
    SinkState,
    Tenant,
)
from tenants.notify import announce
from tenants.rules.sql import RuleSqlError, validate_rule_sql

logger = logging.getLogger(__name__)


class RuleSqlInvalid(ValidationError):
    """The rule's SQL does not compile: a 400 on `sql` that also says where (1-based line and
    column, when the dialect knows them; the API error body carries them as `line`/`column`)."""

    def __init__(self, message: str, line: int | None = None, column: int | None = None):
        where = f" (line {line}, column {column})" if line is not None else ""
        if where and f"line {line}" in message:
            where = ""
        super().__init__({"sql": [f"{message}{where}"]})
        self.line, self.column = line, column


class RuleRunFailed(ValidationError):
    """The rule compiled but evaluating it on the sample message failed (a dry-run 400)."""

    def __init__(self, message: str):
        super().__init__({"context": [message]})


# `test`: POST /api/v1/rules/test is the dry run; `new`: the portal's /rules/new/ page.
RESERVED_RULE_NAMES = frozenset({"test", "new"})


def _compile_rule_sql(sql: str) -> None:
    if not isinstance(sql, str) or not sql.strip():
        raise RuleSqlInvalid("SQL is empty.")
    try:
        validate_rule_sql(sql)
    except RuleSqlError as exc:
        raise RuleSqlInvalid(exc.message, exc.line, exc.column) from None


def _validate_rule(sql: str, actions: object, previous: list | None = None) -> list[dict]:
    """Compile the SQL and normalize the actions (webhooks get a secret); the stored actions."""
    _compile_rule_sql(sql)
    try:
        return normalize_actions(actions, previous)
    except RuleActionError as exc:
        raise ValidationError({"actions": [str(exc)]}) from None


@transaction.atomic
def rule_create(
    *, tenant: Tenant, name: str, sql: str, actions: list | None = None, enabled: bool = True
) -> Rule:
    actions = _validate_rule(sql, actions if actions is not None else [])
    if name in RESERVED_RULE_NAMES:
        raise ValidationError({"name": [f"{name!r} is reserved; choose another name."]})
    rule = Rule(tenant=tenant, name=name, sql=sql, actions=actions, enabled=enabled)
    try:
        rule.full_clean(exclude=["tenant"], validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise ValidationError(exc.message_dict) from None
    if Rule.objects.filter(tenant=tenant, name=name).exists():
        raise ValidationError({"name": [f"Rule {name!r} already exists."]})
    rule.save()
    if enabled:  # its FROM's topics are archived from now on (the live job's feed)
        announce(tenant.slug, ChangeKind.HISTORY_CHANGED, ids=[rule.id])
    return rule


@transaction.atomic
def rule_update(rule: Rule, **fields: object) -> Rule:
    """Change a rule; saving its SQL or enabling it (again) resumes it if the live job paused it
    for going over its budget (`paused_at`). A change of the SQL or the actions is a new
    `version` of the rule (what `new-only` runs over history key the actions done by)."""
    previous = list(rule.actions or [])
    previous_sql = rule.sql
    for key in ("sql", "actions", "enabled"):
        if key in fields:
            setattr(rule, key, fields[key])
    rule.actions = _validate_rule(rule.sql, rule.actions, previous)
    if "sql" in fields or fields.get("enabled") is True:
        rule.paused_at, rule.paused_reason = None, ""
    if rule.sql != previous_sql or rule.actions != previous:
        rule.version = F("version") + 1
    rule.save()
    rule.refresh_from_db(fields=["version"])
    if "sql" in fields or "enabled" in fields:  # what the archive keeps for it may change
        announce(rule.tenant.slug, ChangeKind.HISTORY_CHANGED, ids=[rule.id])
    return rule


@transaction.atomic
def rule_delete(rule: Rule) -> None:
    slug, rule_id, enabled = rule.tenant.slug, rule.id, rule.enabled
    rule.delete()
    if enabled:
        announce(slug, ChangeKind.HISTORY_CHANGED, ids=[rule_id])


REPLAY_BATCH = 100  # dead letters re-sent per replay call (oldest first); call again for more


# Replays per tenant (all its rules together): each may send REPLAY_BATCH webhook calls.
REPLAY_RATE_DEFAULT = "6/min"


class ReplayThrottled(Exception):
    """The tenant replayed dead letters too often; `wait` seconds until it may again."""

    def __init__(self, wait: float):
        self.wait = wait
        super().__init__(f"Dead letters were replayed too often; try again in {wait:.0f} s.")


def _replay_allowed(tenant: Tenant) -> None:
    from django.conf import settings

    from tenants.accounts.throttles import hit

    rate = (
        getattr(settings, "RULE_REPLAY_RATE", None)
        or os.environ.get("RULE_REPLAY_RATE")
        or REPLAY_RATE_DEFAULT
    )
    wait = hit("rule-replay", str(tenant.pk), rate)
    if wait:
        raise ReplayThrottled(wait)


def rule_dead_letters_replay(
    rule: Rule, *, attempts: int = 2, backoff: float = 0.5, timeout: float = 5.0
) -> dict[str, int]:
    """Re-send the rule's webhook dead letters (oldest first, up to REPLAY_BATCH) through the
    same webhook call the jobs make (`common.webhooks.delivery`), signed with the secret the rule holds
    now for that URL. A delivered letter is deleted; one that fails again stays, with its
    attempts and error updated; one whose URL the rule no longer has stays (`orphaned`). A sink's
    letter goes back into that sink's outbox (`queued`; the rules job delivers it, and a new
    dead letter says so if it fails again), as room in the outbox allows. The calls
    made are metered as `actions_executed` in the usage log (`billing.actions_replayed_record`).
    A tenant may replay REPLAY_RATE_DEFAULT times a minute (`RULE_REPLAY_RATE`), all its rules
    together; more is ReplayThrottled, and nothing is sent."""
    from concurrent.futures import ThreadPoolExecutor

    _replay_allowed(rule.tenant)

    from common.webhooks.delivery import post_signed

    secrets_by_url = {
        a.get("url"): a.get("secret")
        for a in rule.actions or []
        if isinstance(a, dict) and a.get("type") == "webhook"
    }
    letters = list(RuleDeadLetter.objects.filter(rule=rule).order_by("created_at", "id"))
    sendable, orphaned, done_already = [], 0, 0
    requeue: list[tuple[RuleDeadLetter, int]] = []
    for letter in letters[:REPLAY_BATCH]:
        action = letter.action if isinstance(letter.action, dict) else {}
        url = action.get("url")
        sink = _sink_index(rule, action)
        if sink is None and (action.get("type") != "webhook" or url not in secrets_by_url):
            orphaned += 1
            continue
        held = _ledger_holds(rule, letter.ledger_key)
        if held is True:
            # A run over history did this action since: sending it again would be twice.
            letter.delete()
            done_already += 1
            continue
        if held is False:
            # A run under way has claimed it: kept unsent (in `remaining`); the run fires it,
            # or gives it back if it cannot, and a later replay sends it.
            continue
        if sink is not None:
            requeue.append((letter, sink))
        else:
            sendable.append((letter, url))
    queued = _requeue_sink_letters(rule, requeue)

    def send(item):
        letter, url = item
        return post_signed(
            url,
            str(secrets_by_url[url] or ""),
            letter.output,
            rule_id=rule.id,
            attempts=attempts,
            backoff=backoff,
            timeout=timeout,
            body_text=letter.body or None,
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(send, sendable))
    # Each call made is an action executed, delivered or not (as the rules job meters them).
    from tenants.billing.services import actions_replayed_record

    actions_replayed_record(rule.tenant.slug, len(sendable) + queued)
    delivered = failed = 0
    for (letter, _), result in zip(sendable, results, strict=True):
        if result.ok:
            _ledger_record(rule, letter)
            letter.delete()
            delivered += 1
        else:
            letter.attempts += result.attempts
            letter.error = storable_text(result.error)
            letter.save(update_fields=["attempts", "error"])
            failed += 1
    return {
        "replayed": len(sendable),
        "queued": queued,
        "delivered": delivered,
        "failed": failed,
        "orphaned": orphaned,
        "done_already": done_already,
        "remaining": RuleDeadLetter.objects.filter(rule=rule).count(),
    }


def _sink_index(rule: Rule, action: dict) -> int | None:
    """The place among the rule's actions of the sink a dead letter's action names (its type
    and the setting naming it), or None when it is not a sink or the rule no longer has it."""
    from common.sinks import SINK_NAMES

    name = SINK_NAMES.get(str(action.get("type")))
    if name is None:
        return None
    for index, candidate in enumerate(rule.actions or []):
        if isinstance(candidate, dict) and candidate.get("type") == action.get("type"):
            if candidate.get(name) == action.get(name):
                return index
    return None


@transaction.atomic
def _requeue_sink_letters(rule: Rule, letters: list[tuple[RuleDeadLetter, int]]) -> int:
    """Sink letters back into their outboxes (recorded done in the action ledger, as the job's
    own appends are), as many as each outbox has room for (`max_sink_outbox_messages`);
    returns how many."""
    from common.webhooks.delivery import output_json
    from tenants.tenant.selectors import effective_quota

    most = effective_quota(rule.tenant)["max_sink_outbox_messages"]
    room: dict[int, int] = {}
    queued = 0
    for letter, index in letters:
        if index not in room:
            # The sink's state counts what waits (the sender finds sinks by it, as the job's
            # appends keep it): locked while this adds to it
            SinkState.objects.get_or_create(
                rule=rule, action_index=index, defaults={"tenant_id": rule.tenant_id}
            )
            state = SinkState.objects.select_for_update().get(rule=rule, action_index=index)
            room[index] = most - state.waiting
        if room[index] <= 0:
            continue
        room[index] -= 1
        output = letter.output if isinstance(letter.output, dict) else {"value": letter.output}
        body = letter.body or output_json(output)
        SinkOutbox.objects.create(
            tenant_id=rule.tenant_id, rule=rule, action_index=index,
            key=str(output.get("clientid") or ""), body=body,
            ts_ms=int(letter.created_at.timestamp() * 1000), ledger_key=letter.ledger_key,
        )  # fmt: skip
        SinkState.objects.filter(rule=rule, action_index=index).update(
            waiting=F("waiting") + 1, waiting_bytes=F("waiting_bytes") + len(body.encode())
        )
        _ledger_record(rule, letter)
        letter.delete()
        queued += 1
    return queued


def _ledger_key(rule: Rule, text: str):
    from spark.rules.ledger import ActionKey

    return ActionKey.decode(rule.id, text)


def _ledger_holds(rule: Rule, text: str) -> bool | None:
    """Does the action ledger hold this dead letter's action: True when done since (fired),
    False when a run under way has claimed it (not confirmed yet), None when it holds nothing."""
    key = _ledger_key(rule, text)
    if key is None:
        return None
    return (
        RuleActionLedger.objects.filter(
            rule=rule,
            version=key.version,
            message_id=key.message_id,
            output=key.output,
            action=key.action,
        )
        .values_list("fired", flat=True)
        .first()
    )


def _ledger_record(rule: Rule, letter: RuleDeadLetter) -> None:
    """A replayed letter delivered is an action done: `new-only` runs will not repeat it (a
    run's claim of it, taken meanwhile, becomes fired)."""
    key = _ledger_key(rule, letter.ledger_key)
    if key is None:
        return
    entry, created = RuleActionLedger.objects.get_or_create(
        rule=rule,
        version=key.version,
        message_id=key.message_id,
        output=key.output,
        action=key.action,
        defaults={
            "message_ts": datetime.fromtimestamp(key.ts_ms / 1000, UTC),
            "source": "replay",
        },
    )
    if not created and not entry.fired:
        RuleActionLedger.objects.filter(pk=entry.pk).update(fired=True, done_at=timezone.now())


def rule_dead_letters_clear(rule: Rule) -> int:
    """Forget the rule's dead letters (after the tenant has seen or replayed them)."""
    deleted, _ = RuleDeadLetter.objects.filter(rule=rule).delete()
    return deleted


def rule_dry_run(*, sql: str, context: dict, tenant: Tenant | None = None) -> dict:
    """Evaluate `sql` on one sample message with the jobs' own compiled semantics and budgets
    (`common.rules.budget`: time, outputs, sizes); writes nothing. `{"match": True, "outputs":
    [...]}` or `{"match": False}`; a rule over its budget, like any failure, is a RuleRunFailed
    (400) naming it, never a server error."""
    if not sql.strip():
        raise RuleSqlInvalid("SQL is empty.")
    try:
        answer = dry_run(sql, context, rule_budget(tenant))
    except RuleSyntaxError as exc:
        raise RuleSqlInvalid(exc.message, exc.line, exc.column) from None
    except RuleRuntimeError as exc:
        raise RuleRunFailed(str(exc)) from None
    except Exception as exc:  # the dialect returns errors; anything else is still the rule's
        logger.exception("dry run failed unexpectedly")
        raise RuleRunFailed(f"evaluation failed: {type(exc).__name__}") from None
    return utf8_value(answer)


def rule_budget(tenant: Tenant | None) -> Budget:
    """What a rule of `tenant` may spend on one message: the operator's time budget and the
    plan's outputs per message (`max_rule_outputs`, overrides applied), as the jobs apply it."""
    if tenant is None:
        return default_budget()
    from tenants.tenant.selectors import effective_quota

    return default_budget(effective_quota(tenant).get("max_rule_outputs"))


def rules_reseal_secrets() -> dict[str, int]:
    """Every rule's webhook secrets and sink credentials sealed under the current `SEALING_KEY` (the last step of a
    rotation, `common.security.sealed`); read and written as stored, past the field that opens them."""
    from django.db import connection

    from common.security import sealed

    counts = {"rules": 0, "resealed": 0, "current": 0, "unopened": 0}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT id, actions FROM tenants_rule ORDER BY id FOR UPDATE")
        for rule_id, stored in cursor.fetchall():
            counts["rules"] += 1
            actions = json.loads(stored) if isinstance(stored, str) else stored
            changed = False
            for action in actions or []:
                for field in sealed.SEALED_FIELDS:  # signing secrets and sinks' credentials
                    secret = action.get(field) if isinstance(action, dict) else None
                    if not isinstance(secret, str):
                        continue
                    try:
                        again = sealed.reseal(secret)
                    except sealed.SealError:
                        counts["unopened"] += 1
                        continue
                    if again == secret:
                        counts["current"] += 1
                    else:
                        action[field], changed = again, True
                        counts["resealed"] += 1
            if changed:
                cursor.execute(
                    "UPDATE tenants_rule SET actions = %s::jsonb WHERE id = %s",
                    [json.dumps(actions), rule_id],
                )
    return counts

"""Writes of the tenant domain. Each is one transaction; broker-relevant ones announce the change
(see `tenants.notify`), which Postgres delivers when the transaction commits."""

from __future__ import annotations

import json
import logging
import os
import re
from datetime import UTC, datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import F
from django.utils import timezone

from common import secrets
from common.client_id_pattern import PatternError
from common.client_id_pattern import validate as validate_client_id_pattern
from common.mqtt.errors import MQTTError
from common.mqtt.topics import validate_topic_filter, validate_topic_name
from common.notifications import ChangeKind
from common.rule_actions import RuleActionError, normalize_actions
from common.rules import Budget, RuleRuntimeError, RuleSyntaxError, default_budget, dry_run
from common.storable import storable_text, utf8_value
from tenants import audit
from tenants.login_tokens import login_token
from tenants.models import (
    QUOTA_KEYS,
    RESERVED_SLUGS,
    AclRule,
    ApiToken,
    Credential,
    Device,
    Membership,
    Plan,
    Rule,
    RuleActionLedger,
    RuleDeadLetter,
    Tenant,
)
from tenants.notify import announce
from tenants.rule_sql import RuleSqlError, validate_rule_sql
from tenants.suspension import require_active

logger = logging.getLogger(__name__)

DEFAULT_PLAN = "free"
DEFAULT_PLANS = {
    "free": {"name": "Free", "monthly_price_cents": 0},
    "pro": {
        "name": "Pro",
        "monthly_price_cents": 4900,
        "price_per_million_messages_cents": 100,
        "max_connections": 10_000,
        "max_publish_rate": 5_000,
        "max_inbound_bytes_rate": 50_000_000,
        "max_outbound_bytes_rate": 100_000_000,
        "max_message_size": 1_048_576,
        "max_subscriptions_per_client": 1000,
        "max_queued_messages": 10_000,
        "max_retained_messages": 100_000,
        "max_session_expiry": 7 * 86_400,
        "max_rule_outputs": 1000,
        "journey_retention_hours": 7 * 24,
        # A paid plan keeps a week of every topic until the tenant sets policies of its own.
        "history_default_days": 7,
        "max_history_days": 90,
        "max_history_policies": 100,
    },
}


def plan_get_or_create(slug: str = DEFAULT_PLAN) -> Plan:
    if slug not in DEFAULT_PLANS and not Plan.objects.filter(slug=slug).exists():
        raise ValidationError({"plan": f"Unknown plan {slug!r}."})
    plan, _ = Plan.objects.get_or_create(slug=slug, defaults=DEFAULT_PLANS.get(slug, {}))
    return plan


def validate_slug(slug: str) -> None:
    tenant = Tenant(slug=slug)
    try:
        tenant.clean_fields(exclude=["name", "status", "plan", "quota_overrides", "created_at"])
    except ValidationError as exc:
        raise ValidationError({"tenant": exc.message_dict.get("slug", ["Invalid slug."])}) from None
    if slug in RESERVED_SLUGS:
        raise ValidationError({"tenant": [f"{slug!r} is reserved; choose another name."]})


@transaction.atomic
def tenant_change_plan(tenant: Tenant, plan: str, *, at: datetime | None = None) -> Tenant:
    """Move a tenant to another plan from `at` (now by default), keeping the history billing
    prorates the base fee with; the broker hears of the new limits (at once: a change is
    recorded when it takes effect, so `at` is never in the future).

    `at` may lie in the past (an operator recording an upgrade from the 1st), but not before the
    tenant's latest plan change (the history stays in order) nor inside a period already
    invoiced (issued invoices are never rewritten)."""
    from tenants.models import Invoice, TenantPlanChange

    new = plan_get_or_create(plan)
    if new.id == tenant.plan_id:
        return tenant
    now = timezone.now()
    at = (at or now).astimezone(UTC)
    if at > now:
        raise ValidationError(
            {"from": [f"{at:%Y-%m-%d %H:%M} UTC is in the future: change the plan on that day."]}
        )
    latest = (
        TenantPlanChange.objects.select_for_update()
        .filter(tenant=tenant)
        .order_by("-effective_at", "-id")
        .first()
    )
    if latest is not None and at < latest.effective_at:
        raise ValidationError(
            {
                "from": [
                    f"{tenant.slug} changed plan on {latest.effective_at:%Y-%m-%d %H:%M} UTC: "
                    "a new change cannot take effect before it."
                ]
            }
        )
    invoiced = (
        Invoice.objects.filter(
            tenant=tenant, status__in=[Invoice.Status.ISSUED, Invoice.Status.PAID]
        )
        .order_by("-period")
        .values_list("period", flat=True)
        .first()
    )
    if invoiced is not None and f"{at:%Y-%m}" <= invoiced:
        raise ValidationError(
            {
                "from": [
                    f"{invoiced} is already invoiced for {tenant.slug}: a plan change can take "
                    "effect from the month after."
                ]
            }
        )
    TenantPlanChange.objects.create(
        tenant=tenant, from_plan_id=tenant.plan_id, to_plan=new, effective_at=at
    )
    tenant.plan = new
    tenant.save(update_fields=["plan"])
    transaction.on_commit(lambda: announce(tenant.slug, "tenant.quota"))
    return tenant


def tenant_create(slug: str, *, plan: str = DEFAULT_PLAN, name: str = "") -> Tenant:
    validate_slug(slug)
    if Tenant.objects.filter(slug=slug).exists():
        raise ValidationError({"tenant": [f"Tenant {slug!r} already exists."]})
    return Tenant.objects.create(slug=slug, name=name or slug, plan=plan_get_or_create(plan))


@transaction.atomic
def tenant_set_status(tenant: Tenant, status: str) -> Tenant:
    if status not in Tenant.Status.values:
        raise ValidationError({"status": [f"Status must be one of {Tenant.Status.values}."]})
    tenant.status = status
    tenant.save(update_fields=["status"])
    announce(tenant.slug, ChangeKind.TENANT_STATUS)
    return tenant


TENANT_SETTINGS = ("name", "acl_default", "archive_enabled", "queue_qos0_offline")


@transaction.atomic
def tenant_update_settings(tenant: Tenant, **settings: object) -> Tenant:
    """Change the tenant's own settings (see TENANT_SETTINGS); brokers reload them live."""
    unknown = sorted(set(settings) - set(TENANT_SETTINGS))
    if unknown:
        raise ValidationError({key: ["Not a tenant setting."] for key in unknown})
    for key, value in settings.items():
        setattr(tenant, key, value)
    tenant.full_clean(exclude=["plan"])
    tenant.save(update_fields=list(settings))
    announce(tenant.slug, ChangeKind.TENANT_SETTINGS)
    return tenant


@transaction.atomic
def tenant_set_quota(tenant: Tenant, overrides: dict[str, object]) -> Tenant:
    """Override plan limits: keys from QUOTA_KEYS, non-negative integers; None removes one."""
    merged = dict(tenant.quota_overrides or {})
    for key, value in overrides.items():
        if key not in QUOTA_KEYS:
            raise ValidationError(
                {key: [f"Unknown quota key; valid keys: {', '.join(QUOTA_KEYS)}."]}
            )
        if value is None:
            merged.pop(key, None)
            continue
        number = _whole_number(value)
        if number is None:
            raise ValidationError({key: [f"Must be a non-negative whole number, got {value!r}."]})
        merged[key] = number
    tenant.quota_overrides = merged
    tenant.save(update_fields=["quota_overrides"])
    announce(tenant.slug, ChangeKind.TENANT_QUOTA)
    return tenant


def _whole_number(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


@transaction.atomic
def signup(
    *, tenant: str, email: str, password: str, api_token: bool = True
) -> tuple[Tenant, AbstractBaseUser, str | None]:
    """A new tenant owned by a new user; returns them and, with `api_token` (the API's signup,
    whose caller goes on with it), the user's login token (`tenants.login_tokens`). The portal's
    signup asks for none: a token nobody is shown is only something to leak."""
    email = (email or "").strip().lower()
    User = get_user_model()
    if not re.fullmatch(r"[^@\s]+@[^@\s]+\.[^@\s]+", email):
        raise ValidationError({"email": ["Enter a valid email address."]})
    if User.objects.filter(username=email).exists():
        raise ValidationError({"email": ["An account with this email already exists."]})
    user = User(username=email, email=email)
    try:
        validate_password(password, user)
    except ValidationError as exc:
        raise ValidationError({"password": exc.messages}) from None
    with audit.acting_as(email):  # not logged in yet, but the one doing it
        new_tenant = tenant_create(tenant)
        user.set_password(password)
        user.save()
        Membership.objects.create(user=user, tenant=new_tenant, role=Membership.Role.OWNER)
        token = login_token(user=user, tenant=new_tenant) if api_token else None
    return new_tenant, user, token


def membership_add(*, tenant: Tenant, user: AbstractBaseUser, role: str) -> Membership:
    if role not in Membership.Role.values:
        raise ValidationError({"role": [f"Role must be one of {Membership.Role.values}."]})
    membership, _ = Membership.objects.update_or_create(
        user=user, tenant=tenant, defaults={"role": role}
    )
    return membership


def api_token_create(*, user: AbstractBaseUser, tenant: Tenant, name: str = "default"):
    require_active(tenant)
    raw = secrets.generate_api_token()
    token = ApiToken.objects.create(
        user=user,
        tenant=tenant,
        name=name[:64] or "default",
        digest=secrets.api_token_digest(raw),
        prefix=raw[:12],
    )
    return token, raw


def api_token_delete(token: ApiToken) -> None:
    token.delete()


def _validate_client_id_policy(policy: str, pattern: str) -> None:
    if policy not in Device.ClientIdPolicy.values:
        raise ValidationError(
            {"client_id_policy": [f"Must be one of {Device.ClientIdPolicy.values}."]}
        )
    if policy == Device.ClientIdPolicy.PATTERN:
        if not pattern:
            raise ValidationError({"client_id_pattern": ["A pattern policy needs a pattern."]})
        try:  # a glob, never a regex: it runs on the broker's loop at every CONNECT
            validate_client_id_pattern(pattern)
        except PatternError as exc:
            raise ValidationError(
                {"client_id_pattern": [f"Not a valid pattern: {exc} (use * and ?)."]}
            ) from None


@transaction.atomic
def device_create(
    *,
    tenant: Tenant,
    name: str,
    client_id_policy: str = Device.ClientIdPolicy.EXACT,
    client_id_pattern: str = "",
    attributes: dict | None = None,
    enabled: bool = True,
    password: str | None = None,
) -> tuple[Device, str]:
    """Create a device and its first credential; returns the secret, which is never stored."""
    require_active(tenant)
    _validate_client_id_policy(client_id_policy, client_id_pattern)
    device = Device(
        tenant=tenant,
        name=name,
        client_id_policy=client_id_policy,
        client_id_pattern=client_id_pattern,
        attributes=attributes or {},
        enabled=enabled,
    )
    try:
        device.full_clean(exclude=["tenant"], validate_unique=False, validate_constraints=False)
    except ValidationError as exc:
        raise ValidationError(exc.message_dict) from None
    if Device.objects.filter(tenant=tenant, name=name).exists():
        raise ValidationError({"name": [f"Device {name!r} already exists in {tenant.slug}."]})
    try:
        with transaction.atomic():
            device.save()
    except IntegrityError:
        raise ValidationError(
            {"name": [f"Device {name!r} already exists in {tenant.slug}."]}
        ) from None
    if password is not None and len(password) < 16:
        raise ValidationError({"password": ["A device secret needs at least 16 characters."]})
    secret = password or secrets.generate_secret()
    credential = Credential.objects.create(
        device=device,
        secret_hash=secrets.hash_secret(secret),
        scram_verifier=secrets.scram_verifier(secret),
    )
    announce(tenant.slug, ChangeKind.DEVICE_CREATED, device=device.name, ids=[device.id])
    announce(tenant.slug, ChangeKind.CREDENTIAL_CREATED, device=device.name, ids=[credential.id])
    return device, secret


@transaction.atomic
def device_update(device: Device, **fields: object) -> Device:
    allowed = {"enabled", "client_id_policy", "client_id_pattern", "attributes"}
    unknown = set(fields) - allowed
    if unknown:
        raise ValidationError({key: ["This field cannot be changed."] for key in unknown})
    was_enabled = device.enabled
    for key, value in fields.items():
        setattr(device, key, value)
    _validate_client_id_policy(device.client_id_policy, device.client_id_pattern)
    device.save()
    if device.enabled != was_enabled:
        kind = ChangeKind.DEVICE_ENABLED if device.enabled else ChangeKind.DEVICE_DISABLED
    else:
        kind = ChangeKind.DEVICE_UPDATED
    announce(device.tenant.slug, kind, device=device.name, ids=[device.id])
    return device


@transaction.atomic
def device_delete(device: Device) -> None:
    slug, name, device_id = device.tenant.slug, device.name, device.id
    device.delete()
    announce(slug, ChangeKind.DEVICE_DELETED, device=name, ids=[device_id])


DEFAULT_ROTATION_GRACE = timedelta(hours=24)
MAX_ROTATION_GRACE = timedelta(days=30)


@transaction.atomic
def credential_rotate(
    device: Device,
    *,
    expires_at: datetime | None = None,
    grace: timedelta | None = DEFAULT_ROTATION_GRACE,
) -> tuple[Credential, str]:
    """Issue a new secret (returned once) and retire the previous one after `grace`.

    A device holds at most two live secrets: the new one and, for the grace period, the newest
    previous one, so devices can be moved over without downtime. Older secrets, and the previous
    one too when `grace` is zero or None ("now"), are revoked at once. The broker refuses a
    secret past its expiry and drops the connections that authenticated with it then.
    """
    now = timezone.now()
    if expires_at is not None and expires_at <= now:
        raise ValidationError({"expires_at": ["Must be in the future."]})
    if grace is not None and (grace < timedelta(0) or grace > MAX_ROTATION_GRACE):
        raise ValidationError(
            {"grace_seconds": [f"Must be between 0 and {int(MAX_ROTATION_GRACE.total_seconds())}."]}
        )
    live = [
        c
        for c in Credential.objects.select_for_update()
        .filter(device=device, revoked_at=None)
        .order_by("-created_at", "-id")
        if c.expires_at is None or c.expires_at > now
    ]
    keep = live[0] if live and grace else None
    revoked = [c.id for c in live if c is not keep]
    Credential.objects.filter(id__in=revoked).update(revoked_at=now)
    if keep is not None:
        retire_at = now + grace
        if keep.expires_at is None or keep.expires_at > retire_at:
            keep.expires_at = retire_at
        keep.retired_at = now
        keep.save(update_fields=["expires_at", "retired_at"])
    parsed = secrets.parse_scram_verifier(keep.scram_verifier) if keep else None
    secret = secrets.generate_secret()
    credential = Credential.objects.create(
        device=device,
        secret_hash=secrets.hash_secret(secret),
        scram_verifier=secrets.scram_verifier(secret, *((parsed[3], parsed[0]) if parsed else ())),
        expires_at=expires_at,
    )
    announce(
        device.tenant.slug,
        ChangeKind.CREDENTIAL_ROTATED,
        device=device.name,
        ids=[credential.id, *revoked, *([keep.id] if keep else [])],
    )
    return credential, secret


@transaction.atomic
def credential_retire_now(credential: Credential) -> Credential:
    """End a retiring secret's grace period now (the portal asks first): a revocation."""
    return credential_revoke(credential)


@transaction.atomic
def credential_revoke(credential: Credential) -> Credential:
    if credential.revoked_at is None:
        credential.revoked_at = timezone.now()
        credential.save(update_fields=["revoked_at"])
        device = credential.device
        announce(
            device.tenant.slug,
            ChangeKind.CREDENTIAL_REVOKED,
            device=device.name,
            ids=[credential.id],
        )
    return credential


def credentials_expire() -> int:
    """Mark credentials past their expiry as revoked and tell the broker; returns how many."""
    expired = 0
    now = timezone.now()
    due = Credential.objects.filter(revoked_at=None, expires_at__lte=now).select_related(
        "device__tenant"
    )
    for credential in due:
        with transaction.atomic():
            updated = Credential.objects.filter(id=credential.id, revoked_at=None).update(
                revoked_at=now
            )
            if updated:
                expired += 1
                device = credential.device
                announce(
                    device.tenant.slug,
                    ChangeKind.CREDENTIAL_EXPIRED,
                    device=device.name,
                    ids=[credential.id],
                )
    return expired


def _validate_acl(action: str, permission: str, topic: str) -> None:
    errors: dict[str, list[str]] = {}
    if action not in AclRule.Action.values:
        errors["action"] = [f"Must be one of {AclRule.Action.values}."]
    if permission not in AclRule.Permission.values:
        errors["permission"] = [f"Must be one of {AclRule.Permission.values}."]
    if not topic or len(topic) > 512:
        errors["topic"] = ["A topic filter of 1-512 characters is required."]
    else:
        try:
            validate_topic_filter(topic)
        except MQTTError as exc:
            errors["topic"] = [f"Invalid topic filter: {exc}"]
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def validate_acl_test_topic(action: str, topic: str) -> None:
    """The ACL tester's topic: a topic name to publish to, a filter to subscribe to."""
    try:
        if action == "publish":
            validate_topic_name(topic)
        else:
            validate_topic_filter(topic)
    except MQTTError as exc:
        raise ValidationError(
            {"topic": [f"Invalid topic {'name' if action == 'publish' else 'filter'}: {exc}"]}
        ) from None


def acl_add(
    *,
    tenant: Tenant,
    action: str,
    permission: str,
    topic: str,
    device: Device | None = None,
    position: int | None = None,
) -> AclRule:
    _validate_acl(action, permission, topic)
    if device is not None and device.tenant_id != tenant.id:
        raise ValidationError({"device": ["No such device."]})
    if position is None:
        last = AclRule.objects.filter(tenant=tenant).order_by("-position").first()
        position = (last.position + 1) if last else 0
    rule = AclRule.objects.create(
        tenant=tenant,
        device=device,
        action=action,
        permission=permission,
        topic=topic,
        position=position,
    )
    announce(tenant.slug, ChangeKind.ACL_CHANGED, ids=[rule.id])
    return rule


@transaction.atomic
def acl_update(rule: AclRule, **fields: object) -> AclRule:
    for key in ("action", "permission", "topic", "position"):
        if key in fields:
            setattr(rule, key, fields[key])
    _validate_acl(rule.action, rule.permission, rule.topic)
    rule.save()
    announce(rule.tenant.slug, ChangeKind.ACL_CHANGED, ids=[rule.id])
    return rule


@transaction.atomic
def acl_delete(rule: AclRule) -> None:
    slug, rule_id = rule.tenant.slug, rule.id
    rule.delete()
    announce(slug, ChangeKind.ACL_CHANGED, ids=[rule_id])


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

    from tenants.throttles import hit

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
    same webhook call the jobs make (`common.webhook`), signed with the secret the rule holds
    now for that URL. A delivered letter is deleted; one that fails again stays, with its
    attempts and error updated; one whose URL the rule no longer has stays (`orphaned`). The calls
    made are metered as `actions_executed` in the usage log (`billing.actions_replayed_record`).
    A tenant may replay REPLAY_RATE_DEFAULT times a minute (`RULE_REPLAY_RATE`), all its rules
    together; more is ReplayThrottled, and nothing is sent."""
    from concurrent.futures import ThreadPoolExecutor

    _replay_allowed(rule.tenant)

    from common.webhook import post_signed

    secrets_by_url = {
        a.get("url"): a.get("secret")
        for a in rule.actions or []
        if isinstance(a, dict) and a.get("type") == "webhook"
    }
    letters = list(RuleDeadLetter.objects.filter(rule=rule).order_by("created_at", "id"))
    sendable, orphaned, done_already = [], 0, 0
    for letter in letters[:REPLAY_BATCH]:
        action = letter.action if isinstance(letter.action, dict) else {}
        url = action.get("url")
        if action.get("type") != "webhook" or url not in secrets_by_url:
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
        sendable.append((letter, url))

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
    from tenants.billing import actions_replayed_record

    actions_replayed_record(rule.tenant.slug, len(sendable))
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
        "delivered": delivered,
        "failed": failed,
        "orphaned": orphaned,
        "done_already": done_already,
        "remaining": RuleDeadLetter.objects.filter(rule=rule).count(),
    }


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
    from tenants.selectors import effective_quota

    return default_budget(effective_quota(tenant).get("max_rule_outputs"))


def demo_seed(*, tenant_slug: str = "demo", device_name: str = "demo-device", password: str):
    """Idempotently ensure the demo tenant and device of `make run` exist with `password`."""
    with transaction.atomic():
        tenant = Tenant.objects.filter(slug=tenant_slug).first() or tenant_create(tenant_slug)
        device = Device.objects.filter(tenant=tenant, name=device_name).first()
        if device is None:
            device, _ = device_create(
                tenant=tenant,
                name=device_name,
                password=password,
                client_id_policy=Device.ClientIdPolicy.ANY,
            )
        elif not any(
            secrets.verify_secret(password, c.secret_hash)
            for c in device.credentials.filter(revoked_at=None)
        ):
            Credential.objects.create(
                device=device,
                secret_hash=secrets.hash_secret(password),
                scram_verifier=secrets.scram_verifier(password),
            )
            announce(tenant.slug, ChangeKind.CREDENTIAL_CREATED, device=device.name)
    return tenant, device


def rules_reseal_secrets() -> dict[str, int]:
    """Every rule's webhook secrets sealed under the current `SEALING_KEY` (the last step of a
    rotation, `common.sealed`); read and written as stored, past the field that opens them."""
    from django.db import connection

    from common import sealed

    counts = {"rules": 0, "resealed": 0, "current": 0, "unopened": 0}
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT id, actions FROM tenants_rule ORDER BY id FOR UPDATE")
        for rule_id, stored in cursor.fetchall():
            counts["rules"] += 1
            actions = json.loads(stored) if isinstance(stored, str) else stored
            changed = False
            for action in actions or []:
                secret = action.get("secret") if isinstance(action, dict) else None
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
                    action["secret"], changed = again, True
                    counts["resealed"] += 1
            if changed:
                cursor.execute(
                    "UPDATE tenants_rule SET actions = %s::jsonb WHERE id = %s",
                    [json.dumps(actions), rule_id],
                )
    return counts

"""Reads of the tenant domain. Every function takes the tenant it reads within: nothing here can
return another tenant's rows."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Count, Exists, OuterRef, QuerySet
from django.http import Http404
from django.utils import timezone

from common import acl, secrets
from common.acl import AclEntry
from tenants.models import (
    QUOTA_KEYS,
    AclRule,
    ApiToken,
    Device,
    DeviceConnection,
    Membership,
    Rule,
    RuleDeadLetter,
    RuleMetrics,
    Tenant,
    Usage,
)


def memberships_for_user(user: AbstractBaseUser) -> QuerySet[Membership]:
    return Membership.objects.filter(user=user).select_related("tenant", "tenant__plan")


def current_membership(user: AbstractBaseUser, chosen: str | None) -> Membership | None:
    """The membership the portal shows: the tenant chosen in the session, else the first."""
    memberships = memberships_for_user(user).order_by("created_at")
    membership = memberships.filter(tenant__slug=chosen).first() if chosen else None
    return membership or memberships.first()


def membership_get(user: AbstractBaseUser, tenant: Tenant) -> Membership | None:
    return Membership.objects.filter(user=user, tenant=tenant).first()


def api_token_lookup(raw_token: str) -> ApiToken | None:
    return (
        ApiToken.objects.select_related("user", "tenant")
        .filter(digest=secrets.api_token_digest(raw_token))
        .first()
    )


def api_tokens_list(*, tenant: Tenant, user: AbstractBaseUser) -> QuerySet[ApiToken]:
    return ApiToken.objects.filter(tenant=tenant, user=user).order_by("-created_at")


# A broker refreshes its connections' heartbeat every 30 s (data_plane.tenancy.presence): a row
# older than this belongs to a broker that is gone.
PRESENCE_STALE_AFTER = timedelta(seconds=90)


def live_connections(*, tenant: Tenant) -> QuerySet[DeviceConnection]:
    return DeviceConnection.objects.filter(
        tenant=tenant, heartbeat_at__gt=timezone.now() - PRESENCE_STALE_AFTER
    )


def _with_presence(devices: QuerySet[Device], tenant: Tenant) -> QuerySet[Device]:
    """Each device annotated with `connected`: a live connection at a live broker."""
    return devices.annotate(
        connected=Exists(live_connections(tenant=tenant).filter(device=OuterRef("pk")))
    )


def devices_list(*, tenant: Tenant, name: str | None = None) -> QuerySet[Device]:
    devices = Device.objects.filter(tenant=tenant).select_related("tenant")
    if name:
        devices = devices.filter(name__icontains=name)
    return _with_presence(devices, tenant)


def device_get(*, tenant: Tenant, name: str) -> Device:
    """The tenant's device by name; Http404 otherwise (another tenant's device included)."""
    device = (
        _with_presence(Device.objects.filter(tenant=tenant, name=name), tenant)
        .select_related("tenant")
        .first()
    )
    if device is None:
        raise Http404(f"No device named {name!r}.")
    return device


def device_connections(*, device: Device) -> QuerySet[DeviceConnection]:
    """The device's live connections (several when its client-id policy allows it)."""
    return live_connections(tenant=device.tenant).filter(device=device)


def acl_check(*, tenant: Tenant, device_name: str, action: str, topic: str) -> dict:
    """The ACL tester: may the tenant's device `device_name` publish to / subscribe to `topic`?
    Judged by `common.acl`, the broker's own evaluation, over the tenant's rules in the order the
    broker loads them; Http404 for a device the tenant does not have."""
    device = device_get(tenant=tenant, name=device_name)
    rules = list(
        AclRule.objects.filter(tenant=tenant).select_related("device").order_by("position", "id")
    )
    entries = [
        AclEntry(
            action=r.action,
            allow=r.permission == "allow",
            topic=r.topic,
            device=r.device.name if r.device else None,
        )
        for r in rules
    ]
    verdict = acl.explain(
        entries,
        tenant=tenant.slug,
        device=device.name,
        default_allow=tenant.acl_default != "deny",
        action=action,
        topic=topic,
    )
    rule = rules[verdict.rule] if verdict.rule is not None else None
    return {
        "device": device.name,
        "action": action,
        "topic": topic,
        "allowed": verdict.allowed,
        "rule": rule,
        "decided_by": "rule" if rule is not None else "default",
    }


def effective_quota(tenant: Tenant) -> dict[str, int]:
    """The plan's limits with the tenant's overrides applied: what the broker enforces."""
    limits = tenant.plan.limits()
    for key, value in (tenant.quota_overrides or {}).items():
        if key in QUOTA_KEYS:
            limits[key] = int(value)
    return limits


def acl_rules_list(*, tenant: Tenant, device: Device | None = None) -> QuerySet[AclRule]:
    rules = AclRule.objects.filter(tenant=tenant).select_related("device")
    if device is not None:
        rules = rules.filter(device=device)
    return rules


def acl_rule_get(*, tenant: Tenant, rule_id: int) -> AclRule:
    rule = AclRule.objects.filter(tenant=tenant, id=rule_id).select_related("device").first()
    if rule is None:
        raise Http404(f"No ACL rule {rule_id}.")
    return rule


def rules_list(*, tenant: Tenant, name: str | None = None) -> QuerySet[Rule]:
    """The tenant's rules with their metrics row (if the jobs wrote one) and dead-letter count."""
    rules = (
        Rule.objects.filter(tenant=tenant)
        .select_related("metrics")
        .annotate(dead_letters_count=Count("dead_letters"))
    )
    if name:
        rules = rules.filter(name__icontains=name)
    return rules


def rule_get(*, tenant: Tenant, name: str) -> Rule:
    rule = rules_list(tenant=tenant).filter(name=name).first()
    if rule is None:
        raise Http404(f"No rule named {name!r}.")
    return rule


RULE_METRIC_COUNTERS = ("matched", "passed", "failed", "actions_ok", "actions_failed")


def rule_metrics(rule: Rule) -> dict:
    """The rule's counters as the jobs last wrote them; zeros before they ever ran it."""
    try:
        metrics = rule.metrics
    except RuleMetrics.DoesNotExist:
        metrics = None
    if metrics is None:
        return {
            **dict.fromkeys(RULE_METRIC_COUNTERS, 0),
            "last_error": "",
            "last_error_at": None,
            "lag_ms": None,
            "updated_at": None,
        }
    return {
        **{key: getattr(metrics, key) for key in RULE_METRIC_COUNTERS},
        "last_error": metrics.last_error,
        "last_error_at": metrics.last_error_at,
        "lag_ms": metrics.lag_ms,
        "updated_at": metrics.updated_at,
    }


def rule_dead_letters_list(*, rule: Rule) -> QuerySet[RuleDeadLetter]:
    return RuleDeadLetter.objects.filter(rule=rule)


def usage_list(*, tenant: Tenant) -> QuerySet[Usage]:
    return Usage.objects.filter(tenant=tenant)


def tenant_get(slug: str) -> Tenant:
    tenant = Tenant.objects.select_related("plan").filter(slug=slug).first()
    if tenant is None:
        raise Tenant.DoesNotExist(f"No tenant {slug!r}.")
    return tenant

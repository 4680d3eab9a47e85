"""Reads of a tenant's ACL rules, and the check of what a device may do on a topic."""

from __future__ import annotations

from django.db.models import QuerySet
from django.http import Http404

from common.access import acl
from common.access.acl import AclEntry
from tenants.devices.selectors import device_get
from tenants.models import (
    AclRule,
    Device,
    Tenant,
)


def acl_check(*, tenant: Tenant, device_name: str, action: str, topic: str) -> dict:
    """The ACL tester: may the tenant's device `device_name` publish to / subscribe to `topic`?
    Judged by `common.access.acl`, the broker's own evaluation, over the tenant's rules in the order the
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

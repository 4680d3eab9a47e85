"""Writes of a tenant's ACL rules (publish/subscribe allow/deny by topic filter); each announces
the change to the broker."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from common.contracts.notifications import ChangeKind
from common.mqtt.errors import MQTTError
from common.mqtt.topics import validate_topic_filter, validate_topic_name
from tenants.models import (
    AclRule,
    Device,
    Tenant,
)
from tenants.notify import announce


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

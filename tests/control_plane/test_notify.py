"""Broker-relevant changes are announced with NOTIFY, seen here by a real LISTEN connection."""

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from tenants.acls import services as acl_services
from tenants.devices import services as device_services
from tenants.models import Credential
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_broker_relevant_change_is_announced(listener):
    tenant = tenant_services.tenant_create("acme")
    device, _ = device_services.device_create(tenant=tenant, name="sensor-1")
    assert [(n["kind"], n.get("device")) for n in listener(2)] == [
        ("device.created", "sensor-1"),
        ("credential.created", "sensor-1"),
    ]
    device_services.credential_rotate(device, grace=None)  # the previous secret is revoked now
    device_services.device_update(device, enabled=False)
    acl_services.acl_add(tenant=tenant, action="both", permission="deny", topic="x/#")
    tenant_services.tenant_set_quota(tenant, {"max_connections": 3})
    tenant_services.tenant_set_status(tenant, "suspended")
    credential = Credential.objects.filter(device=device, revoked_at=None).get()
    device_services.credential_revoke(credential)
    device_services.device_delete(device)
    kinds = [n["kind"] for n in listener(7)]
    assert kinds == [
        "credential.rotated",
        "device.disabled",
        "acl.changed",
        "tenant.quota",
        "tenant.status",
        "credential.revoked",
        "device.deleted",
    ]


def test_payload_names_tenant_kind_and_ids(listener):
    tenant = tenant_services.tenant_create("acme")
    device, _ = device_services.device_create(tenant=tenant, name="sensor-1")
    listener(2)
    credential, _ = device_services.credential_rotate(device)
    (payload,) = listener(1)
    assert payload["tenant"] == "acme"
    assert payload["device"] == "sensor-1"
    assert credential.id in payload["ids"]


def test_nothing_is_announced_for_a_rolled_back_change(listener):
    tenant = tenant_services.tenant_create("acme")
    with pytest.raises(RuntimeError), transaction.atomic():
        device_services.device_create(tenant=tenant, name="ghost")
        raise RuntimeError("abort")
    assert listener(1, timeout=1.0) == []


def test_expiry_sweep_revokes_and_announces(listener):
    tenant = tenant_services.tenant_create("acme")
    device, _ = device_services.device_create(tenant=tenant, name="sensor-1")
    listener(2)
    Credential.objects.filter(device=device).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert device_services.credentials_expire() == 1
    (payload,) = listener(1)
    assert payload["kind"] == "credential.expired"
    assert device_services.credentials_expire() == 0


def test_what_the_archive_keeps_is_announced_when_policies_and_rules_change(listener):
    """Each broker re-reads a tenant's history needs on `history.changed` (tests/storage/
    test_history_broker.py shows it act on it)."""
    from tenants.history.selectors import history_policy_get
    from tenants.history.services import history_policy_create, history_policy_delete

    tenant = tenant_services.tenant_create("acme")
    policy = history_policy_create(tenant=tenant, topic_filter="a/#", days=1)
    history_policy_delete(history_policy_get(tenant=tenant, policy_id=policy.id))
    rule = rule_services.rule_create(tenant=tenant, name="r", sql='SELECT * FROM "b/+"')
    rule_id = rule.id
    rule_services.rule_update(rule, actions=[])  # neither FROM nor enabled: nothing to say
    rule_services.rule_update(rule, enabled=False)
    rule_services.rule_create(tenant=tenant, name="off", sql='SELECT * FROM "c"', enabled=False)
    rule_services.rule_delete(rule)  # disabled already: the archive kept nothing for it
    changes = listener(5, timeout=0.5)  # a fifth would be one too many
    assert [(n["kind"], n["tenant"]) for n in changes] == [("history.changed", "acme")] * 4
    assert [n["ids"] for n in changes] == [[policy.id], [policy.id], [rule_id], [rule_id]]

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from common.security import secrets
from tenants.accounts import selectors as account_selectors
from tenants.accounts import services as account_services
from tenants.devices import selectors as device_selectors
from tenants.devices import services as device_services
from tenants.models import Credential
from tenants.tenant import selectors as tenant_selectors
from tenants.tenant import services as tenant_services

pytestmark = pytest.mark.django_db


def test_signup_creates_tenant_owner_and_token():
    tenant, user, token = account_services.signup(
        tenant="acme", email="Ann@Example.com", password="correct horse 9"
    )
    assert tenant.slug == "acme" and tenant.plan.slug == "free"
    assert user.email == "ann@example.com"
    assert account_selectors.api_token_lookup(token).tenant == tenant


@pytest.mark.parametrize(
    "slug", ["ab", "Acme", "-acme", "acme-", "a" * 33, "sys", "admin", "api", "www", "ac_me"]
)
def test_bad_or_reserved_slugs_are_refused(slug):
    with pytest.raises(ValidationError):
        tenant_services.tenant_create(slug)


def test_device_secret_is_hashed_and_verifiable():
    tenant = tenant_services.tenant_create("acme")
    device, secret = device_services.device_create(tenant=tenant, name="sensor-1")
    stored = Credential.objects.get(device=device)
    assert secret not in stored.secret_hash
    assert secrets.verify_secret(secret, stored.secret_hash)
    assert not secrets.verify_secret(secret + "x", stored.secret_hash)
    assert device.username == "acme/sensor-1"


def test_rotation_now_revokes_previous_secret():
    tenant = tenant_services.tenant_create("acme")
    device, first = device_services.device_create(tenant=tenant, name="sensor-1")
    _, second = device_services.credential_rotate(device, grace=None)
    active = [c for c in device.credentials.all() if c.is_active]
    assert len(active) == 1
    assert secrets.verify_secret(second, active[0].secret_hash)
    assert not secrets.verify_secret(first, active[0].secret_hash)


def test_rotation_keeps_the_previous_secret_for_its_grace_period():
    tenant = tenant_services.tenant_create("acme")
    device, first = device_services.device_create(tenant=tenant, name="sensor-1")
    before = timezone.now()
    _, second = device_services.credential_rotate(device)  # default grace: 24 h
    new, old = device.credentials.order_by("-id")
    assert (new.state, old.state) == ("active", "retiring")
    assert secrets.verify_secret(first, old.secret_hash)
    assert (
        timedelta(hours=23, minutes=59) < old.expires_at - before <= timedelta(hours=24, seconds=5)
    )
    assert new.expires_at is None
    # Both verifiers share the salt: one SCRAM server-first message fits either secret.
    assert new.scram_verifier.split("$")[2] == old.scram_verifier.split("$")[2]
    with pytest.raises(ValidationError, match="grace_seconds"):
        device_services.credential_rotate(device, grace=timedelta(days=31))


def test_duplicate_device_name_within_tenant_refused_but_allowed_across_tenants():
    acme, other = tenant_services.tenant_create("acme"), tenant_services.tenant_create("other")
    device_services.device_create(tenant=acme, name="sensor-1")
    with pytest.raises(ValidationError, match="already exists"):
        device_services.device_create(tenant=acme, name="sensor-1")
    device_services.device_create(tenant=other, name="sensor-1")


def test_quota_overrides_apply_and_bad_keys_refused():
    tenant = tenant_services.tenant_create("acme")
    tenant_services.tenant_set_quota(tenant, {"max_connections": 5, "max_keepalive": "30"})
    quota = tenant_selectors.effective_quota(tenant)
    assert quota["max_connections"] == 5 and quota["max_keepalive"] == 30
    assert quota["max_message_size"] == tenant.plan.max_message_size
    with pytest.raises(ValidationError):
        tenant_services.tenant_set_quota(tenant, {"max_conections": 5})
    with pytest.raises(ValidationError):
        tenant_services.tenant_set_quota(tenant, {"max_connections": -1})


def test_device_lookup_never_crosses_tenants():
    acme, other = tenant_services.tenant_create("acme"), tenant_services.tenant_create("other")
    device_services.device_create(tenant=other, name="secret-device")
    from django.http import Http404

    with pytest.raises(Http404):
        device_selectors.device_get(tenant=acme, name="secret-device")
    assert list(device_selectors.devices_list(tenant=acme)) == []

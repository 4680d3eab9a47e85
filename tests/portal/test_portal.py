"""Portal pages through Django's test client against real Postgres."""

import pytest
from django.contrib.auth import get_user_model

from tenants.accounts import services as account_services
from tenants.devices import services as device_services
from tenants.models import Credential, Device, Membership
from tenants.tenant import services as tenant_services

pytestmark = pytest.mark.django_db


@pytest.fixture
def owner(client):
    tenant, user, _ = account_services.signup(
        tenant="acme", email="me@acme.io", password="a long passphrase"
    )
    client.force_login(user)
    return tenant


def test_signup_logs_in_and_shows_dashboard(client):
    response = client.post(
        "/signup/",
        {"tenant": "acme", "email": "me@acme.io", "password": "a long passphrase"},
        follow=True,
    )
    assert response.status_code == 200
    assert b"acme" in response.content and b"mqtt://" in response.content


def test_signup_errors_are_shown(client):
    response = client.post(
        "/signup/", {"tenant": "sys", "email": "me@acme.io", "password": "a long passphrase"}
    )
    assert b"reserved" in response.content


def test_login_and_logout(client):
    account_services.signup(tenant="acme", email="me@acme.io", password="a long passphrase")
    bad = client.post("/login/", {"email": "me@acme.io", "password": "wrong"})
    assert b"Wrong email or password" in bad.content
    good = client.post("/login/", {"email": "me@acme.io", "password": "a long passphrase"})
    assert good.status_code == 302
    assert client.get("/").status_code == 200
    assert client.get("/logout/").status_code == 405  # logging out is a POST
    client.post("/logout/")
    assert client.get("/").status_code == 302


def test_pages_require_login(client):
    for url in ("/", "/devices/", "/acls/", "/quota/", "/tokens/"):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]


def test_create_device_shows_secret_once(client, owner):
    response = client.post(
        "/devices/", {"name": "sensor-1", "client_id_policy": "exact"}, follow=True
    )
    secret = response.context["secret"]["password"]
    assert b"acme/sensor-1" in response.content and secret.encode() in response.content
    stored = Credential.objects.get(device__name="sensor-1")
    from common.security.secrets import verify_secret

    assert verify_secret(secret, stored.secret_hash)
    again = client.get("/devices/sensor-1/")
    assert secret.encode() not in again.content


def test_rotate_disable_delete(client, owner):
    device, first = device_services.device_create(tenant=owner, name="sensor-1")
    rotated = client.post("/devices/sensor-1/rotate/", follow=True)
    new_secret = rotated.context["secret"]["password"]
    assert new_secret != first
    client.post("/devices/sensor-1/toggle/")
    assert Device.objects.get(id=device.id).enabled is False
    assert client.get("/devices/sensor-1/delete/").status_code == 200  # confirmation page
    client.post("/devices/sensor-1/delete/")
    assert not Device.objects.filter(id=device.id).exists()


def test_rotation_grace_and_the_confirmation_before_retiring(client, owner):
    device, first = device_services.device_create(tenant=owner, name="sensor-1")
    page = client.post("/devices/sensor-1/rotate/", {"grace": "3600"}, follow=True)
    assert b"keeps working for 1 hour" in page.content
    old = device.credentials.get(retired_at__isnull=False)
    assert old.state == "retiring" and old.is_active
    assert b'data-state="retiring"' in page.content and b"UTC" in page.content
    # Retiring now asks first: GET is a confirmation page and changes nothing.
    confirm = client.get(f"/devices/sensor-1/credentials/{old.id}/retire/")
    assert confirm.status_code == 200 and b"Retire secret" in confirm.content
    assert Credential.objects.get(id=old.id).is_active
    client.post(f"/devices/sensor-1/credentials/{old.id}/retire/")
    assert Credential.objects.get(id=old.id).state == "revoked"
    # A rotation with no grace period asks first as well.
    ask = client.post("/devices/sensor-1/rotate/", {"grace": "0"})
    assert ask.status_code == 200 and b"no grace period" in ask.content
    assert device.credentials.count() == 2  # nothing issued yet
    client.post("/devices/sensor-1/rotate/", {"grace": "0", "confirm": "yes"})
    assert [c.state for c in device.credentials.all()] == ["active", "revoked", "revoked"]


def test_another_tenants_credential_cannot_be_retired(client, owner):
    other = tenant_services.tenant_create("other")
    theirs, _ = device_services.device_create(tenant=other, name="their-device")
    device_services.credential_rotate(theirs)
    retiring = theirs.credentials.get(retired_at__isnull=False)
    mine, _ = device_services.device_create(tenant=owner, name="mine")
    for url in (
        f"/devices/their-device/credentials/{retiring.id}/retire/",
        f"/devices/mine/credentials/{retiring.id}/retire/",  # my device, their credential id
    ):
        assert client.get(url).status_code == 404
        assert client.post(url).status_code == 404
    assert Credential.objects.get(id=retiring.id).state == "retiring"


def test_acls_quota_tokens_pages(client, owner):
    device_services.device_create(tenant=owner, name="d1")
    response = client.post(
        "/acls/",
        {"device": "d1", "action": "publish", "permission": "deny", "topic": "secret/#"},
        follow=True,
    )
    assert b"secret/#" in response.content
    bad = client.post(
        "/acls/", {"device": "", "action": "both", "permission": "allow", "topic": "a/#/b"}
    )
    assert b"Invalid topic filter" in bad.content
    quota = client.get("/quota/")
    assert b"max_connections" in quota.content
    token = client.post("/tokens/", {"name": "ci"})
    assert b"mqp_" in token.content


def test_other_tenants_device_is_404(client, owner):
    other = tenant_services.tenant_create("other")
    device_services.device_create(tenant=other, name="their-device")
    for url in ("/devices/their-device/", "/devices/their-device/delete/"):
        assert client.get(url).status_code == 404
    for url in (
        "/devices/their-device/rotate/",
        "/devices/their-device/toggle/",
        "/devices/their-device/delete/",
    ):
        assert client.post(url).status_code == 404
    assert Device.objects.get(name="their-device").enabled is True


def test_viewer_cannot_write(client, owner):
    device_services.device_create(tenant=owner, name="d1")
    viewer = get_user_model().objects.create_user("v@acme.io", "v@acme.io", "a long passphrase")
    Membership.objects.create(user=viewer, tenant=owner, role="viewer")
    client.force_login(viewer)
    page = client.get("/devices/")
    assert b"d1" in page.content and b"Create device" not in page.content
    for url, data in [
        ("/devices/", {"name": "d2", "client_id_policy": "any"}),
        ("/devices/d1/rotate/", {}),
        ("/devices/d1/toggle/", {}),
        ("/devices/d1/delete/", {}),
        ("/acls/", {"action": "both", "permission": "deny", "topic": "x"}),
        ("/tokens/", {"name": "x"}),
    ]:
        assert client.post(url, data).status_code == 403, url
    assert Device.objects.filter(name="d1", enabled=True).exists()


def test_csrf_is_enforced():
    from django.test import Client

    account_services.signup(tenant="acme", email="me@acme.io", password="a long passphrase")
    strict = Client(enforce_csrf_checks=True)
    response = strict.post("/login/", {"email": "me@acme.io", "password": "a long passphrase"})
    assert response.status_code == 403


def test_admin_lists_tenants(admin_client):
    tenant_services.tenant_create("acme")
    assert b"acme" in admin_client.get("/admin/tenants/tenant/").content


def test_browser_client_identity_is_a_tenant_client(client, owner):
    """The browser client's token: `$console` for a member who may write, `$viewer` (read-only)
    otherwise — both tenant clients the broker meters and limits, never the platform's
    `$portal` identity, whose traffic is not billed."""
    from common.security import service_token

    writer = client.post("/client/token/").json()
    assert writer["username"] == f"{owner.slug}/$console"
    assert writer["client_id"].startswith("$console-")
    assert not service_token.is_platform_client(writer["client_id"])
    viewer = get_user_model().objects.create_user("v@acme.io", "v@acme.io", "a long passphrase")
    Membership.objects.create(user=viewer, tenant=owner, role="viewer")
    client.force_login(viewer)
    reader = client.post("/client/token/").json()
    assert reader["username"] == f"{owner.slug}/$viewer"
    assert not service_token.is_platform_client(reader["client_id"])
    assert service_token.verify(
        service_token.load_key(),
        owner.slug,
        reader["client_id"],
        reader["password"],
        device="$viewer",
    )
    assert service_token.is_platform_client(service_token.new_client_id("$portal"))

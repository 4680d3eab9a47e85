"""Account pre-hijacking (issue 28, point 6), from the attacker's side: someone signs up with an
address that is not theirs, waits for an operator to give that address a tenant or the admin, and
keeps an API token through the real owner's password reset. Django's test client on the real URL
configuration and Postgres; mail in Django's outbox."""

from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.cache import cache
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from tenants.accounts import services as account_services
from tenants.accounts import trust as accounts
from tenants.models import ApiToken, Membership, Tenant

pytestmark = pytest.mark.django_db
SQUATTER_PASSWORD = "squatter passphrase 1"
OWNER_PASSWORD = "the real owner's passphrase"


@pytest.fixture(autouse=True)
def _fresh_throttles():
    cache.clear()
    yield
    cache.clear()


def _link(message) -> str:
    return re.search(r"https?://[^/\s]+(/\S+)", message.body).group(1)


def _bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _squat(email: str) -> tuple[Client, str]:
    """Mallory signs up with someone else's address, through the API and the portal."""
    api = APIClient().post(
        "/api/v1/signup",
        {"tenant": "squat", "email": email, "password": SQUATTER_PASSWORD},
        format="json",
    )
    assert api.status_code == 201, api.content  # CONTRACT: 201, the tenant and a token
    assert api.json()["user"]["email_verified"] is False
    browser = Client()
    assert (
        browser.post("/login/", {"email": email, "password": SQUATTER_PASSWORD}).status_code == 302
    )
    return browser, api.json()["token"]


def _reset_password(email: str, password: str) -> Client:
    """The real holder of the mailbox takes the address back: password reset by email."""
    mail.outbox.clear()
    owner = Client()
    owner.post("/password-reset/", {"email": email})
    [message] = mail.outbox
    form = owner.get(_link(message), follow=True)
    done = owner.post(
        form.redirect_chain[-1][0],
        {"new_password1": password, "new_password2": password},
        follow=True,
    )
    assert done.status_code == 200 and done.context["user"].is_authenticated
    return owner


def test_squatter_does_not_get_the_tenant_an_operator_creates_for_the_address():
    browser, token = _squat("ceo@bigco.io")
    with pytest.raises(CommandError, match="not verified"):
        call_command("create_tenant", "bigco", "--owner", "CEO@bigco.io", stdout=StringIO())
    assert not Tenant.objects.filter(slug="bigco").exists()  # nothing half made
    assert not Membership.objects.filter(tenant__slug="bigco").exists()
    assert _bearer(token).get("/api/v1/tenant").json()["slug"] == "squat"  # only their own

    # The real CEO resets the password: the squatter's token and session die with it ...
    owner = _reset_password("ceo@bigco.io", OWNER_PASSWORD)
    assert _bearer(token).get("/api/v1/tenant").status_code == 401
    assert browser.get("/devices/").status_code == 302  # logged out: to the login page
    assert not Client().login(username="ceo@bigco.io", password=SQUATTER_PASSWORD)
    # ... and the reset proved the mailbox: now the operator's command goes through, for them.
    out = StringIO()
    call_command("create_tenant", "bigco", "--owner", "ceo@bigco.io", stdout=out)
    assert json.loads(out.getvalue())["owner"] == "ceo@bigco.io"
    owner.post("/switch/", {"tenant": "bigco"})
    assert owner.get("/").context["tenant"].slug == "bigco"


def test_squatter_does_not_become_an_operator():
    browser, token = _squat("ops@platform.io")
    with pytest.raises(CommandError, match="not verified"):
        call_command("create_operator", "ops@platform.io", "--send", stdout=StringIO())
    user = get_user_model().objects.get(email="ops@platform.io")
    assert not user.is_staff and not user.is_superuser
    assert mail.outbox == [] or all("operator" not in m.subject for m in mail.outbox)
    assert browser.get("/operator/").status_code == 403
    assert browser.get("/admin/").status_code == 302  # the admin's login page, not the admin


def test_verifying_the_email_needs_the_mailbox_and_the_account():
    """The link goes to the address; it works only for the account it was made for, logged in:
    the mailbox's holder clicking a link for an account someone else made verifies nothing."""
    response = Client().post(
        "/signup/", {"tenant": "acme", "email": "me@acme.io", "password": OWNER_PASSWORD}
    )
    assert response.status_code == 302
    [message] = mail.outbox
    assert message.to == ["me@acme.io"] and "confirm" in message.subject.lower()
    link = _link(message)
    user = get_user_model().objects.get(email="me@acme.io")

    anonymous = Client().get(link)  # a mail scanner, or whoever holds only the mailbox
    assert anonymous.status_code == 302 and anonymous["Location"].startswith("/login/")
    assert not accounts.is_verified(user)
    _, stranger, _ = account_services.signup(
        tenant="other", email="x@other.io", password=OWNER_PASSWORD
    )
    wrong = Client()
    wrong.force_login(stranger)
    assert wrong.get(link).status_code == 403
    assert not accounts.is_verified(user)

    me = Client()
    me.post(f"/login/?next={link}", {"email": "me@acme.io", "password": OWNER_PASSWORD})
    done = me.get(link, follow=True)
    assert b"is confirmed" in done.content
    assert accounts.is_verified(user)
    assert b"is already confirmed" in me.get(link, follow=True).content
    # Verified: an operator may now give this account more.
    call_command("create_operator", "me@acme.io", stdout=StringIO())
    assert get_user_model().objects.get(email="me@acme.io").is_staff


def test_the_portal_shows_the_verification_state_and_resends_a_bounded_number_of_links():
    browser = Client()
    browser.post("/signup/", {"tenant": "acme", "email": "me@acme.io", "password": OWNER_PASSWORD})
    page = browser.get("/").content.decode()
    assert 'data-email-unverified="me@acme.io"' in page and "Send the link again" in page
    mail.outbox.clear()
    pages = [browser.post("/account/verify/resend/", follow=True) for _ in range(8)]
    assert all(p.status_code == 200 for p in pages)
    assert b"sent a new link to me@acme.io" in pages[0].content
    assert b"try again" in pages[-1].content  # told, not silently dropped
    assert 1 <= len(mail.outbox) <= accounts.RESEND_LIMIT
    browser.get(_link(mail.outbox[-1]))  # the newest link works
    assert "data-email-unverified" not in browser.get("/").content.decode()


def test_a_new_tenants_owner_uses_it_before_verifying():
    """What the account created itself is its own at once (CONTRACT: signup → token works)."""
    response = APIClient().post(
        "/api/v1/signup",
        {"tenant": "acme", "email": "me@acme.io", "password": OWNER_PASSWORD},
        format="json",
    )
    client = _bearer(response.json()["token"])
    assert client.post("/api/v1/devices", {"name": "d1"}, format="json").status_code == 201
    assert client.post("/api/v1/tokens", {"name": "ci"}, format="json").status_code == 201


def test_password_change_ends_every_other_session_and_every_api_token():
    _, token = _squat("me@acme.io")
    accounts.mark_verified(get_user_model().objects.get(email="me@acme.io"))
    elsewhere = Client()
    elsewhere.login(username="me@acme.io", password=SQUATTER_PASSWORD)
    here = Client()
    here.login(username="me@acme.io", password=SQUATTER_PASSWORD)
    form = here.get("/account/password/")
    assert form.status_code == 200
    changed = here.post(
        "/account/password/",
        {
            "old_password": SQUATTER_PASSWORD,
            "new_password1": OWNER_PASSWORD,
            "new_password2": OWNER_PASSWORD,
        },
        follow=True,
    )
    assert changed.status_code == 200 and b"Password changed" in changed.content
    assert here.get("/devices/").status_code == 200  # this session stays
    assert elsewhere.get("/devices/").status_code == 302  # every other one ends
    assert _bearer(token).get("/api/v1/tenant").status_code == 401
    assert not ApiToken.objects.filter(user__email="me@acme.io").exists()


def test_a_password_hash_upgrade_at_login_keeps_the_tokens(settings):
    """Django re-hashes a password at login when its hasher changes: the same password, so the
    account's tokens stay (only a new password ends them)."""
    from django.contrib.auth.hashers import make_password

    settings.PASSWORD_HASHERS = [
        "django.contrib.auth.hashers.PBKDF2PasswordHasher",
        "django.contrib.auth.hashers.MD5PasswordHasher",
    ]
    _, user, token = account_services.signup(
        tenant="acme", email="me@acme.io", password=OWNER_PASSWORD
    )
    old_hash = make_password(OWNER_PASSWORD, hasher="md5")
    get_user_model().objects.filter(pk=user.pk).update(password=old_hash)
    assert Client().login(username="me@acme.io", password=OWNER_PASSWORD)
    assert get_user_model().objects.get(pk=user.pk).password != old_hash  # upgraded
    assert _bearer(token).get("/api/v1/tenant").status_code == 200

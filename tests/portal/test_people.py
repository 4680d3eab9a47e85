"""People and tenants through Django's test client on real Postgres: invitations by email
(Django's mail outbox), accepting by link, removing members, password reset, the one-time login
link of `create_tenant --owner`, the operators' overview — and the attacker's side of each."""

import json
import re
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core import mail
from django.core.management import CommandError, call_command
from django.test import Client

from tenants.accounts import services as account_services
from tenants.accounts import trust as accounts
from tenants.models import ApiToken, Invitation, Membership
from tenants.tenant import services as tenant_services

pytestmark = pytest.mark.django_db
PASSWORD = "a long passphrase"


@pytest.fixture
def owner(client):
    tenant, user, _ = account_services.signup(
        tenant="acme", email="boss@acme.io", password=PASSWORD
    )
    client.force_login(user)
    return tenant, user


def _link(message) -> str:
    return re.search(r"https?://[^/\s]+(/\S+)", message.body).group(1)


def test_invite_by_email_and_accept_with_a_new_account(client, owner):
    tenant, _ = owner
    response = client.post("/members/", {"email": "New@Acme.io", "role": "admin"}, follow=True)
    assert b"Invitation sent to new@acme.io" in response.content
    [message] = mail.outbox
    assert message.to == ["new@acme.io"] and "acme" in message.subject
    link = _link(message)
    assert Invitation.objects.get().digest not in link  # only the digest is kept

    newcomer = Client()
    page = newcomer.get(link)
    assert page.status_code == 200 and b"as <strong>admin</strong>" in page.content
    joined = newcomer.post(link, {"password": PASSWORD}, follow=True)
    assert joined.status_code == 200 and b"Welcome to acme" in joined.content
    membership = Membership.objects.get(user__email="new@acme.io")
    assert (membership.tenant, membership.role) == (tenant, "admin")
    assert newcomer.post(link, {"password": PASSWORD}).status_code == 410  # used once


def test_existing_account_must_log_in_as_the_invited_address(client, owner):
    get_user_model().objects.create_user("old@acme.io", "old@acme.io", PASSWORD)
    client.post("/members/", {"email": "old@acme.io", "role": "viewer"})
    link = _link(mail.outbox[0])
    # Someone else holding the link cannot take the seat.
    account_services.signup(tenant="evil", email="mallory@evil.io", password=PASSWORD)
    mallory = Client()
    mallory.post("/login/", {"email": "mallory@evil.io", "password": PASSWORD})
    assert mallory.post(link).status_code == 403
    assert not Membership.objects.filter(user__email="mallory@evil.io", tenant__slug="acme")
    # Anonymous with the link: told to log in, and cannot create a second account.
    anonymous = Client()
    assert b"log in" in anonymous.get(link).content
    assert anonymous.post(link, {"password": PASSWORD}).status_code == 400
    invited = Client()
    invited.post("/login/", {"email": "old@acme.io", "password": PASSWORD})
    assert invited.post(link).status_code == 302
    assert Membership.objects.filter(user__email="old@acme.io", tenant__slug="acme").exists()


def test_invitations_and_members_from_the_attackers_side(client, owner):
    tenant, _ = owner
    viewer = get_user_model().objects.create_user("v@acme.io", "v@acme.io", PASSWORD)
    target = Membership.objects.create(user=viewer, tenant=tenant, role="viewer")
    client.post("/members/", {"email": "someone@acme.io", "role": "viewer"})
    invitation = Invitation.objects.get()
    _, mallory, _ = account_services.signup(
        tenant="evil", email="mallory@evil.io", password=PASSWORD
    )
    attacker = Client()
    attacker.force_login(mallory)
    page = attacker.get("/members/")
    assert b"v@acme.io" not in page.content and b"someone@acme.io" not in page.content
    for url in (f"/members/{target.id}/remove/", f"/members/invitations/{invitation.id}/revoke/"):
        assert attacker.post(url).status_code == 404, url
    assert attacker.get("/invite/inv_guessed-token/").status_code == 404
    assert Membership.objects.filter(id=target.id).exists() and Invitation.objects.exists()
    # A viewer of acme cannot invite or remove.
    reader = Client()
    reader.force_login(viewer)
    assert reader.post("/members/", {"email": "x@acme.io", "role": "owner"}).status_code == 403
    owner_membership = Membership.objects.get(user__email="boss@acme.io")
    assert reader.post(f"/members/{owner_membership.id}/remove/").status_code == 403


def test_remove_members_keeps_an_owner(client, owner):
    tenant, boss = owner
    admin = get_user_model().objects.create_user("a@acme.io", "a@acme.io", PASSWORD)
    member = Membership.objects.create(user=admin, tenant=tenant, role="admin")
    account_services.api_token_create(user=admin, tenant=tenant)
    assert client.get(f"/members/{member.id}/remove/").status_code == 200  # asks first
    assert Membership.objects.filter(id=member.id).exists()
    client.post(f"/members/{member.id}/remove/")
    assert not Membership.objects.filter(id=member.id).exists()
    assert not ApiToken.objects.filter(user=admin, tenant=tenant).exists()
    mine = Membership.objects.get(user=boss)
    page = client.post(f"/members/{mine.id}/remove/", follow=True)
    assert b"at least one owner" in page.content
    assert Membership.objects.filter(id=mine.id).exists()


def test_an_admin_cannot_hand_out_the_owner_role_or_remove_an_owner(client, owner):
    """The escalation of issue 28: an admin invited their own second address as owner, accepted,
    and removed the original owner. Only owners grant the owner role or remove an owner."""
    tenant, boss = owner
    admin_user = get_user_model().objects.create_user("adm@acme.io", "adm@acme.io", PASSWORD)
    Membership.objects.create(user=admin_user, tenant=tenant, role="admin")
    admin = Client()
    admin.force_login(admin_user)
    page = admin.get("/members/").content.decode()
    assert 'value="owner"' not in page  # not offered ...
    boss_row = page[page.index('data-member="boss@acme.io"') :].split("</tr>")[0]
    assert "Remove" not in boss_row  # ... nor a removal that would be refused
    forged = admin.post("/members/", {"email": "adm.second@evil.io", "role": "owner"})
    assert forged.status_code == 400 and b"Only an owner can invite an owner" in forged.content
    assert not Invitation.objects.filter(role="owner").exists() and mail.outbox == []
    boss_membership = Membership.objects.get(user=boss)
    assert admin.post(f"/members/{boss_membership.id}/remove/").status_code == 403
    assert Membership.objects.get(user=boss).role == "owner"
    # What an admin may do, they still do: invite admins and viewers.
    assert admin.post("/members/", {"email": "ops@acme.io", "role": "admin"}).status_code == 302
    # An owner invites an owner; the new owner may then remove the first (not the last one).
    assert client.post("/members/", {"email": "co@acme.io", "role": "owner"}).status_code == 302
    co = Client()
    co.post(_link(mail.outbox[-1]), {"password": PASSWORD})
    assert Membership.objects.get(user__email="co@acme.io").role == "owner"
    assert co.post(f"/members/{boss_membership.id}/remove/").status_code == 302
    last = Membership.objects.get(user__email="co@acme.io")
    assert b"at least one owner" in co.post(f"/members/{last.id}/remove/", follow=True).content


def test_password_reset_by_email(client):
    account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    anonymous = Client()
    anonymous.post("/password-reset/", {"email": "me@acme.io"})
    anonymous.post("/password-reset/", {"email": "nobody@acme.io"})  # no mail, no hint
    [message] = mail.outbox
    link = _link(message)
    form = anonymous.get(link, follow=True)
    assert b"Choose a password" in form.content
    done = anonymous.post(
        form.redirect_chain[-1][0],
        {"new_password1": "another long passphrase", "new_password2": "another long passphrase"},
        follow=True,
    )
    assert done.status_code == 200 and done.context["user"].is_authenticated
    fresh = Client()
    ok = fresh.post("/login/", {"email": "me@acme.io", "password": "another long passphrase"})
    assert ok.status_code == 302
    assert b"no longer works" in Client().get(link, follow=True).content  # once


def test_create_tenant_with_owner_prints_a_one_time_login_link(settings):
    settings.PORTAL_URL = "http://portal.example:8000"
    out = StringIO()
    call_command("create_tenant", "newco", "--owner", "Founder@NewCo.io", stdout=out)
    body = json.loads(out.getvalue())
    assert body["slug"] == "newco" and body["owner"] == "founder@newco.io"
    assert body["login_url"].startswith("http://portal.example:8000/reset/")
    path = body["login_url"].removeprefix("http://portal.example:8000")
    browser = Client()
    form = browser.get(path, follow=True)
    assert b"Choose a password" in form.content
    done = browser.post(
        form.redirect_chain[-1][0],
        {"new_password1": "founder passphrase", "new_password2": "founder passphrase"},
        follow=True,
    )
    assert done.context["tenant"].slug == "newco"  # logged in, on the tenant's dashboard
    assert b"no longer works" in Client().get(path, follow=True).content
    with pytest.raises(Exception, match="already"):
        call_command("create_tenant", "newco", "--owner", "x@newco.io", stdout=StringIO())


def test_staff_operator_gets_an_overview_not_a_403(client):
    account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    tenant_services.tenant_create("quiet")
    operator = get_user_model().objects.create_user(
        "ops@platform.io", "ops@platform.io", PASSWORD, is_staff=True
    )
    client.force_login(operator)
    home = client.get("/", follow=True)
    assert home.status_code == 200 and home.redirect_chain[-1][0] == "/operator/"
    page = home.content.decode()
    assert 'data-tenant="acme"' in page and 'data-tenant="quiet"' in page
    assert "no owner" in page  # `quiet` has nobody who can log in
    # No tenant, no live socket: it would be refused (403) and retried every 3 s.
    assert "portal/live.js" not in page and 'id="live-status"' not in page
    # ... and no tenant's links in the header (they all led back here): the operators' own.
    nav = page[page.index("<nav>") : page.index("</nav>")]
    assert 'href="/devices/"' not in nav and 'href="/rules/"' not in nav
    assert 'href="/operator/"' in nav and 'href="/admin/"' not in nav  # staff, not superuser
    # Not for tenants' users.
    user_client = Client()
    user_client.post("/login/", {"email": "me@acme.io", "password": PASSWORD})
    assert user_client.get("/operator/").status_code == 403


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:  # bound then closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_invitation_when_the_mail_server_is_down(client, owner, settings, caplog):
    """SMTP down: the owner reads what went wrong (no 500), the invitation stays open and is sent
    again once mail works, with a link that works; the failure is logged."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", _closed_port()
    settings.EMAIL_USE_TLS, settings.EMAIL_TIMEOUT = False, 5
    response = client.post("/members/", {"email": "late@acme.io", "role": "viewer"}, follow=True)
    assert response.status_code == 200
    text = response.content.decode()
    assert "could not be sent" in text and f"127.0.0.1:{settings.EMAIL_PORT}" in text
    assert "ConnectionRefusedError" in text
    invitation = Invitation.objects.get(email="late@acme.io")
    assert invitation.is_open
    assert 'data-invitation="late@acme.io"' in text  # listed, with "send again"
    [record] = [r for r in caplog.records if r.getMessage() == "invitation mail not sent"]
    assert record.levelname == "WARNING" and record.fields["email"] == "late@acme.io"

    # Still down: sending again says so too.
    again = client.post(f"/members/invitations/{invitation.id}/resend/", follow=True)
    assert again.status_code == 200 and "could not be sent" in again.content.decode()

    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"  # mail is back
    sent = client.post(f"/members/invitations/{invitation.id}/resend/", follow=True)
    assert b"Invitation sent again to late@acme.io" in sent.content
    [message] = mail.outbox
    newcomer = Client()
    joined = newcomer.post(_link(message), {"password": PASSWORD}, follow=True)
    assert joined.status_code == 200
    assert Membership.objects.get(user__email="late@acme.io").role == "viewer"


def test_only_writers_of_the_tenant_resend_its_invitations(client, owner):
    tenant, _ = owner
    client.post("/members/", {"email": "x@acme.io", "role": "viewer"})
    invitation = Invitation.objects.get()
    mail.outbox.clear()
    intruder, _, _ = account_services.signup(tenant="evil", email="e@evil.io", password=PASSWORD)
    attacker = Client()
    attacker.login(username="e@evil.io", password=PASSWORD)
    assert attacker.post(f"/members/invitations/{invitation.id}/resend/").status_code == 404
    assert mail.outbox == []


def test_owner_login_link_reissues_a_working_link(settings):
    """`owner_login_link TENANT`: the owner who lost the first link (or the password) gets a new
    one that logs them in once; only an owner of that tenant, never a member or a stranger."""
    settings.PORTAL_URL = "http://portal.example:8000"
    call_command("create_tenant", "newco", "--owner", "founder@newco.io", stdout=StringIO())
    body = _command_json("owner_login_link", "newco")
    assert body["owner"] == "founder@newco.io" and body["sent"] is False
    path = body["login_url"].removeprefix("http://portal.example:8000")
    assert _choose_password(path, "another long phrase").status_code == 200
    assert Client().login(username="founder@newco.io", password="another long phrase")
    assert Client().get(path, follow=True).context["validlink"] is False  # once

    # --send mails it; a second owner means naming one; a viewer or a stranger is refused.
    call_command("owner_login_link", "newco", "--send", stdout=StringIO())
    [message] = mail.outbox
    assert (
        message.to == ["founder@newco.io"] and "http://portal.example:8000/reset/" in message.body
    )
    from tenants.models import Tenant
    from tenants.people import services as people

    tenant = Tenant.objects.get(slug="newco")
    people.owner_ensure(tenant, "cofounder@newco.io")
    with pytest.raises(CommandError, match="several owners"):
        call_command("owner_login_link", "newco", stdout=StringIO())
    out = StringIO()
    call_command("owner_login_link", "newco", "--email", "CoFounder@newco.io", stdout=out)
    assert json.loads(out.getvalue())["owner"] == "cofounder@newco.io"
    viewer = get_user_model().objects.create_user("v@newco.io", "v@newco.io", PASSWORD)
    Membership.objects.create(user=viewer, tenant=tenant, role="viewer")
    account_services.signup(tenant="other", email="boss@other.io", password=PASSWORD)
    for stranger in ("v@newco.io", "boss@other.io"):
        with pytest.raises(CommandError, match="not an owner of newco"):
            call_command("owner_login_link", "newco", "--email", stranger, stdout=StringIO())
    with pytest.raises(CommandError, match="Unknown tenant"):
        call_command("owner_login_link", "nope", stdout=StringIO())


def test_owner_login_link_with_the_mail_server_down_still_prints_the_link(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", _closed_port()
    settings.EMAIL_USE_TLS, settings.EMAIL_TIMEOUT = False, 5
    call_command("create_tenant", "newco", "--owner", "founder@newco.io", stdout=StringIO())
    out = StringIO()
    with pytest.raises(CommandError, match="not mailed to founder@newco.io: ConnectionRefused"):
        call_command("owner_login_link", "newco", "--send", stdout=out)
    assert "/reset/" in json.loads(out.getvalue())["login_url"]


def test_create_operator_makes_an_account_the_portal_logs_in_by_email(settings):
    """`create_operator EMAIL`: a staff superuser whose username is the email (the portal's login
    is by email; `createsuperuser`'s own usernames are not found there), a one-time link to
    choose a password, then the overview of every tenant and the admin."""
    settings.PORTAL_URL = "http://portal.example:8000"
    account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    body = _command_json("create_operator", "Ops@Platform.io")
    assert body["operator"] == "ops@platform.io" and body["created"] is True
    _choose_password(body["login_url"].removeprefix(settings.PORTAL_URL), "operator passphrase")
    portal = Client()
    portal.post("/login/", {"email": "ops@platform.io", "password": "operator passphrase"})
    home = portal.get("/", follow=True)
    assert (
        home.redirect_chain[-1][0] == "/operator/" and 'data-tenant="acme"' in home.content.decode()
    )
    nav = home.content.decode().split("<nav>")[1].split("</nav>")[0]
    assert 'href="/admin/"' in nav  # a superuser: the admin is in the header
    assert portal.get("/admin/").status_code == 200

    # An existing account (a tenant's owner) is promoted, keeping its password, once it has
    # confirmed its address (before, it might be anyone's: tests/security/test_account_takeover);
    # --send mails.
    with pytest.raises(CommandError, match="not verified"):
        call_command("create_operator", "me@acme.io", stdout=StringIO())
    accounts.mark_verified(get_user_model().objects.get(email="me@acme.io"))
    body = _command_json("create_operator", "me@acme.io", "--send")
    assert body["created"] is False and body["sent"] is True
    [message] = mail.outbox
    assert message.to == ["me@acme.io"] and "/reset/" in message.body
    assert Client().login(username="me@acme.io", password=PASSWORD)
    assert get_user_model().objects.get(email="me@acme.io").is_staff
    with pytest.raises(CommandError, match="valid email"):
        call_command("create_operator", "ops", stdout=StringIO())


def _command_json(*args: str) -> dict:
    out = StringIO()
    call_command(*args, stdout=out)
    return json.loads(out.getvalue())


def _choose_password(path: str, password: str):
    """Follow a one-time login link and choose `password` there, as its recipient would."""
    browser = Client()
    form = browser.get(path, follow=True)
    assert form.status_code == 200
    return browser.post(
        form.redirect_chain[-1][0],
        {"new_password1": password, "new_password2": password},
        follow=True,
    )

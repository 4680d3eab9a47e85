"""Login and password-reset throttles (issue 28, point 6), from the attacker's side: a flood of
wrong passwords must not lock the owner out of their own account, and password-reset requests
must not become a mail cannon. Django's test client (REMOTE_ADDR set per request) on Postgres."""

from __future__ import annotations

import pytest
from django.core import mail
from django.core.cache import cache
from django.test import Client, override_settings
from rest_framework.test import APIClient

from tenants.accounts import services as account_services

pytestmark = pytest.mark.django_db
PASSWORD = "the owner's passphrase"
OWNER_ADDRESS = "192.0.2.10"
ATTACKER_ADDRESS = "198.51.100.7"


@pytest.fixture(autouse=True)
def _fresh_throttles():
    cache.clear()
    yield
    cache.clear()


@override_settings(AUTH_THROTTLE_RATE="100/min", AUTH_ACCOUNT_THROTTLE_RATE="5/min")
def test_wrong_passwords_from_elsewhere_do_not_lock_the_owner_out():
    account_services.signup(tenant="acme", email="boss@acme.io", password=PASSWORD)
    owner = Client(REMOTE_ADDR=OWNER_ADDRESS)
    assert owner.post("/login/", {"email": "boss@acme.io", "password": PASSWORD}).status_code == 302
    owner.post("/logout/")

    attacker = Client(REMOTE_ADDR=ATTACKER_ADDRESS)
    codes = [
        attacker.post("/login/", {"email": "boss@acme.io", "password": f"guess-{i}"}).status_code
        for i in range(12)
    ]
    # The guessing is still throttled (5/min; the owner's first login counted: new address then).
    assert codes[:4] == [200] * 4 and set(codes[4:]) == {429}
    # Botnet: every other address is refused too once the account's budget for strangers is spent.
    stranger = Client(REMOTE_ADDR="203.0.113.99")
    assert (
        stranger.post("/login/", {"email": "boss@acme.io", "password": PASSWORD}).status_code == 429
    )

    # The owner, from where they usually log in, with the right password: in, portal and API.
    assert owner.post("/login/", {"email": "boss@acme.io", "password": PASSWORD}).status_code == 302
    token = APIClient(REMOTE_ADDR=OWNER_ADDRESS).post(
        "/api/v1/auth/token", {"email": "boss@acme.io", "password": PASSWORD}, format="json"
    )
    assert token.status_code == 200


@override_settings(AUTH_THROTTLE_RATE="100/min", AUTH_ACCOUNT_THROTTLE_RATE="5/min")
def test_an_account_used_only_through_its_signup_token_is_not_locked_by_strangers():
    """Issue 44 point 6: signup records the address it came from, the account's first usual one;
    the owner who never logged in since (working with the signup's token) still gets in."""
    signed = APIClient(REMOTE_ADDR=OWNER_ADDRESS).post(
        "/api/v1/signup",
        {"tenant": "acme", "email": "boss@acme.io", "password": PASSWORD},
        format="json",
    )
    assert signed.status_code == 201, signed.content
    attacker = Client(REMOTE_ADDR=ATTACKER_ADDRESS)
    for i in range(12):
        attacker.post("/login/", {"email": "boss@acme.io", "password": f"guess-{i}"})
    stranger = Client(REMOTE_ADDR="203.0.113.99")
    assert (
        stranger.post("/login/", {"email": "boss@acme.io", "password": PASSWORD}).status_code == 429
    )
    token = APIClient(REMOTE_ADDR=OWNER_ADDRESS).post(
        "/api/v1/auth/token", {"email": "boss@acme.io", "password": PASSWORD}, format="json"
    )
    assert token.status_code == 200, token.content


@override_settings(AUTH_THROTTLE_RATE="100/min", AUTH_ACCOUNT_THROTTLE_RATE="5/min")
def test_the_owners_own_address_still_throttles_guesses_from_it():
    """A familiar address is no free pass: guesses from it count against (account, address)."""
    account_services.signup(tenant="acme", email="boss@acme.io", password=PASSWORD)
    office = Client(REMOTE_ADDR=OWNER_ADDRESS)
    office.post("/login/", {"email": "boss@acme.io", "password": PASSWORD})
    codes = [
        APIClient(REMOTE_ADDR=OWNER_ADDRESS)
        .post("/api/v1/auth/token", {"email": "boss@acme.io", "password": "x"}, format="json")
        .status_code
        for _ in range(8)
    ]
    assert codes[:4] == [401] * 4 and set(codes[4:]) == {429}  # the login above counted too


def _reset(client: Client, email: str):
    return client.post("/password-reset/", {"email": email})


def test_password_reset_requests_send_a_bounded_number_of_emails():
    account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    account_services.signup(tenant="beta", email="you@beta.io", password=PASSWORD)
    # 25 requests for one account from one address: every answer the same, few emails.
    one = Client(REMOTE_ADDR=ATTACKER_ADDRESS)
    answers = [_reset(one, "me@acme.io") for _ in range(25)]
    assert {(a.status_code, a["Location"]) for a in answers} == {(302, "/password-reset/sent/")}
    to_me = [m for m in mail.outbox if m.to == ["me@acme.io"]]
    assert 1 <= len(to_me) <= 3
    # From many addresses, the account still gets no more.
    for i in range(25):
        _reset(Client(REMOTE_ADDR=f"10.7.0.{i}"), "me@acme.io")
    assert len([m for m in mail.outbox if m.to == ["me@acme.io"]]) == len(to_me)
    # One address cannot mail every account either: its own budget runs out.
    mail.outbox.clear()
    for i in range(25):
        _reset(Client(REMOTE_ADDR="10.8.0.1"), "you@beta.io" if i == 24 else f"n{i}@x.io")
    last = _reset(Client(REMOTE_ADDR="10.8.0.1"), "you@beta.io")
    assert (last.status_code, last["Location"]) == (302, "/password-reset/sent/")  # silent
    assert mail.outbox == []  # you@beta.io's was past this address's budget


def test_a_throttled_reset_looks_the_same_as_one_that_was_sent():
    account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    client = Client(REMOTE_ADDR=ATTACKER_ADDRESS)
    first = client.post("/password-reset/", {"email": "me@acme.io"}, follow=True)
    for _ in range(10):
        client.post("/password-reset/", {"email": "me@acme.io"})
    later = client.post("/password-reset/", {"email": "me@acme.io"}, follow=True)
    assert first.status_code == later.status_code == 200
    assert first.content == later.content

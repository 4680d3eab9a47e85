"""Tokens a user sees, and no others: `POST /auth/token` hands out the same login token until
asked to rotate it (then the old one is refused at once), the API signup's token is that same
login token, and the portal's signup makes none. Through the real API and portal views on
real Postgres."""

import io
import json

import pytest
from django.core.management import call_command
from django.test import Client

from tenants.models import ApiToken
from tests.api.conftest import client_for

pytestmark = pytest.mark.django_db
PASSWORD = "a long passphrase"


def _login(**extra):
    body = {"email": "me@acme.io", "password": PASSWORD, **extra}
    return client_for().post("/api/v1/auth/token", body, format="json")


def _tokens_listed(token: str) -> list[dict]:
    response = client_for(token).get("/api/v1/tokens")
    assert response.status_code == 200, response.content
    return response.json()["results"]


def test_login_hands_out_the_same_token_until_rotated():
    signup = client_for().post(
        "/api/v1/signup",
        {"tenant": "acme", "email": "me@acme.io", "password": PASSWORD},
        format="json",
    )
    assert signup.status_code == 201, signup.content
    first = signup.json()["token"]

    again = [_login() for _ in range(3)]
    assert [r.status_code for r in again] == [200] * 3
    assert {r.json()["token"] for r in again} == {first}
    assert len(_tokens_listed(first)) == 1  # no pile of tokens nobody sees

    rotated = _login(rotate=True)
    assert rotated.status_code == 200, rotated.content
    second = rotated.json()["token"]
    assert second != first
    refused = client_for(first).get("/api/v1/devices")
    assert refused.status_code == 401 and refused.json()["error"]["code"]
    assert client_for(second).get("/api/v1/devices").status_code == 200
    assert _login().json()["token"] == second
    [listed] = _tokens_listed(second)
    assert second.startswith(listed["prefix"])
    # The owner's audit log names them for the rotation (not "anonymous": no one was logged in).
    entries = client_for(second).get("/api/v1/audit").json()["results"]
    rotation = [e for e in entries if e["action"].startswith("apitoken.")]
    assert [e["action"] for e in rotation] == [
        "apitoken.created",
        "apitoken.deleted",
        "apitoken.created",
    ]
    assert {e["actor"] for e in rotation} == {"me@acme.io"}


def test_named_tokens_are_kept_apart_from_the_login_token():
    signup = client_for().post(
        "/api/v1/signup",
        {"tenant": "acme", "email": "me@acme.io", "password": PASSWORD},
        format="json",
    )
    login = signup.json()["token"]
    named = client_for(login).post("/api/v1/tokens", {"name": "ci"}, format="json")
    assert named.status_code == 201
    rotated = _login(rotate=True).json()["token"]
    # Rotating the login token leaves the named one working.
    assert client_for(named.json()["token"]).get("/api/v1/devices").status_code == 200
    listed = sorted((t["name"], t["login"]) for t in _tokens_listed(rotated))
    assert listed == [("ci", False), ("login", True)]


def test_portal_signup_makes_no_api_token():
    browser = Client()
    response = browser.post(
        "/signup/", {"tenant": "acme", "email": "me@acme.io", "password": PASSWORD}, follow=True
    )
    assert response.status_code == 200 and b"Tenant acme is ready" in response.content
    assert not ApiToken.objects.exists()
    tokens_page = browser.get("/tokens/")
    assert tokens_page.status_code == 200 and b"mqp_" not in tokens_page.content
    # The first API login makes the one token the user is then shown.
    assert _login().status_code == 200 and ApiToken.objects.count() == 1


def test_wrong_password_for_token_is_401_in_the_error_envelope():
    client_for().post(
        "/api/v1/signup",
        {"tenant": "acme", "email": "me@acme.io", "password": PASSWORD},
        format="json",
    )
    response = client_for().post(
        "/api/v1/auth/token", {"email": "me@acme.io", "password": "nope"}, format="json"
    )
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "Wrong email or password."
    assert response.headers["WWW-Authenticate"]
    unknown = client_for().post(
        "/api/v1/auth/token", {"email": "who@acme.io", "password": "nope"}, format="json"
    )
    assert unknown.status_code == 401


def test_a_sealing_key_rotation_keeps_the_login_token(monkeypatch):
    old_key, new_key = "old-sealing-key-" + "o" * 40, "new-sealing-key-" + "n" * 40
    monkeypatch.setenv("SEALING_KEY", old_key)
    token = (
        client_for()
        .post(
            "/api/v1/signup",
            {"tenant": "acme", "email": "me@acme.io", "password": PASSWORD},
            format="json",
        )
        .json()["token"]
    )
    monkeypatch.setenv("SEALING_KEY", new_key)
    monkeypatch.setenv("SEALING_KEY_PREVIOUS", old_key)
    out = io.StringIO()
    call_command("reseal_secrets", stdout=out)
    assert json.loads(out.getvalue())["login_tokens"] == 1
    monkeypatch.delenv("SEALING_KEY_PREVIOUS")
    assert _login().json()["token"] == token  # the new key alone opens it
    # A token sealed under a key since dropped: the next login replaces it, and says nothing.
    monkeypatch.setenv("SEALING_KEY", "another-key-" + "a" * 40)
    replaced = _login().json()["token"]
    assert replaced != token and client_for(token).get("/api/v1/devices").status_code == 401

"""The audit log as a tenant's owner reads it: every entry names who acted (the person signing up,
the invitee accepting, the API caller, the operator's command) and says what changed in words,
through the API, the CSV and the portal page (no raw values or dict dumps there). Real views on
real Postgres; the invitation goes through Django's mail outbox."""

import csv
import io
import re
from html import unescape

import pytest
from django.core import mail
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client

from tests.api.conftest import client_for

pytestmark = pytest.mark.django_db
PASSWORD = "a long passphrase"


@pytest.fixture(autouse=True)
def _fresh_throttles():
    cache.clear()
    yield
    cache.clear()


def _entries(token: str) -> list[dict]:
    response = client_for(token).get("/api/v1/audit?limit=200")
    assert response.status_code == 200, response.content
    return response.json()["results"]


def _said(entries: list[dict]) -> set[tuple[str, str]]:
    return {(e["actor"], e["description"]) for e in entries}


def test_audit_entries_name_the_actor_and_read_in_words(monkeypatch):
    signup = client_for().post(
        "/api/v1/signup",
        {"tenant": "acme", "email": "boss@acme.io", "password": PASSWORD},
        format="json",
    )
    assert signup.status_code == 201, signup.content
    token = signup.json()["token"]
    said = _said(_entries(token))
    assert ("boss@acme.io", "Tenant acme created") in said
    assert ("boss@acme.io", "boss@acme.io joined as owner") in said
    assert all(actor == "boss@acme.io" for actor, _ in said)  # never "anonymous"

    # An invitation from the portal, accepted by someone without an account yet.
    boss = Client()
    boss.post("/login/", {"email": "boss@acme.io", "password": PASSWORD})
    boss.post("/members/", {"email": "new@acme.io", "role": "admin"})
    link = re.search(r"https?://[^/\s]+(/\S+)", mail.outbox[-1].body).group(1)
    assert Client().post(link, {"password": PASSWORD}).status_code in (200, 302)

    api = client_for(token)
    assert api.post("/api/v1/devices", {"name": "lamp"}, format="json").status_code == 201
    assert api.patch("/api/v1/devices/lamp", {"enabled": False}, format="json").status_code == 200

    # An operator's command line changes a quota twice.
    monkeypatch.setattr("sys.argv", ["manage.py", "set_quota"])
    call_command("set_quota", "acme", "max_connections=10", stdout=io.StringIO())
    call_command("set_quota", "acme", "max_connections=20", stdout=io.StringIO())

    entries = _entries(token)
    said = _said(entries)
    assert ("boss@acme.io", "Invitation for new@acme.io created (as admin)") in said
    assert ("new@acme.io", "new@acme.io joined as admin") in said
    assert ("new@acme.io", "Invitation for new@acme.io accepted") in said
    assert ("boss@acme.io", "Device lamp created") in said
    assert ("boss@acme.io", "Device lamp disabled") in said
    by_command = {d for a, d in said if a.endswith("manage.py set_quota")}
    assert by_command == {
        "Quota max_connections set to 10 (was the plan's)",
        "Quota max_connections changed from 10 to 20",
    }
    assert all(e["actor"] and e["actor"] != "anonymous" for e in entries)

    rows = list(csv.DictReader(io.StringIO(api.get("/api/v1/audit.csv").content.decode())))
    assert "Quota max_connections changed from 10 to 20" in {r["description"] for r in rows}

    page = boss.get("/audit/").content.decode()
    assert "Quota max_connections changed from 10 to 20" in page
    assert "new@acme.io joined as admin" in page and "Device lamp disabled" in page
    # The cells' text as read (their markup, a <time datetime=…> among it, is not what a person reads).
    cells = re.sub(r"<[^>]+>", "", " ".join(re.findall(r"<td[^>]*>(.*?)</td>", page, re.S)))
    cells = unescape(cells)
    # No Python reprs or dict dumps: no braces, no quoted keys, no key=value pairs.
    assert not re.search(r"[{}\[\]]|'\w+'\s*:|\w+=\S", cells), cells[:2000]

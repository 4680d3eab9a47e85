"""Accountability (issue 20, point 4): every control-plane change is in the tenant's audit log
(who, what, when, from where; API, portal, admin, management commands), visible to its owners
only, exportable as CSV; tenants never see each other's entries. And the portal's security
headers and cookie flags."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.db import connection
from rest_framework.test import APIClient

from common.security.device_credentials import make_ca, make_leaf, pem_of
from tenants.accounts import services as account_services
from tenants.devices import identity
from tenants.devices import services as device_services
from tenants.models import AuditEntry, Device

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fresh_throttles():
    cache.clear()
    yield
    cache.clear()


def token_client(token: str, address: str) -> APIClient:
    client = APIClient(REMOTE_ADDR=address)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def tenants():
    acme, owner, acme_token = account_services.signup(
        tenant="acme", email="owner@acme.io", password="pass-w0rd-acme"
    )
    evil, _, evil_token = account_services.signup(
        tenant="evil", email="owner@evil.io", password="pass-w0rd-evil"
    )
    return acme, owner, acme_token, evil, evil_token


def test_api_changes_are_recorded_with_who_and_where(tenants):
    acme, _, acme_token, evil, evil_token = tenants
    owner = token_client(acme_token, "203.0.113.7")
    assert owner.post("/api/v1/devices", {"name": "sensor-1"}, format="json").status_code == 201
    assert (
        owner.patch("/api/v1/devices/sensor-1", {"enabled": False}, format="json").status_code
        == 200
    )
    assert owner.delete("/api/v1/devices/sensor-1").status_code == 204
    page = owner.get("/api/v1/audit").json()
    actions = [(e["action"], e["target"]) for e in page["results"]]
    assert ("device.created", "sensor-1") in actions
    assert ("device.updated", "sensor-1") in actions
    assert ("device.deleted", "sensor-1") in actions
    created = next(e for e in page["results"] if e["action"] == "device.created")
    assert created["actor"] == "owner@acme.io"
    assert created["via"] == "api"
    assert created["address"] == "203.0.113.7"
    # No secret in any entry: the device's secret hash and SCRAM verifier are not there.
    secret_hash = json.dumps(page)
    assert "sha256$" not in secret_hash and "scram-sha-256$" not in secret_hash
    # The other tenant sees none of it, and its own changes stay its own.
    attacker = token_client(evil_token, "198.51.100.9")
    assert attacker.post("/api/v1/devices", {"name": "e1"}, format="json").status_code == 201
    theirs = attacker.get("/api/v1/audit").json()["results"]
    assert theirs and all("sensor-1" not in e["target"] for e in theirs)
    assert all(e["actor"] != "owner@acme.io" for e in theirs)
    ours = owner.get("/api/v1/audit").json()["results"]
    assert all(e["target"] != "e1" for e in ours)
    attacker_csv = attacker.get("/api/v1/audit.csv").content.decode()
    assert "sensor-1" not in attacker_csv and "owner@acme.io" not in attacker_csv


def test_only_owners_read_the_log_and_csv_exports_it(tenants):
    acme, _, acme_token, _, _ = tenants
    owner = token_client(acme_token, "203.0.113.7")
    owner.post("/api/v1/devices", {"name": "=cmd"}, format="json")  # refused: a bad name
    owner.post("/api/v1/devices", {"name": "sensor-1"}, format="json")
    viewer = get_user_model().objects.create_user(
        username="v@acme.io", email="v@acme.io", password="x" * 20
    )
    account_services.membership_add(tenant=acme, user=viewer, role="viewer")
    _, viewer_token = account_services.api_token_create(user=viewer, tenant=acme)
    assert token_client(viewer_token, "203.0.113.8").get("/api/v1/audit").status_code == 403
    response = owner.get("/api/v1/audit.csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert any(r["action"] == "device.created" and r["target"] == "sensor-1" for r in rows)
    assert all(r["address"] in ("", "203.0.113.7") for r in rows)


def test_portal_admin_and_command_changes_are_recorded(tenants, client, admin_client):
    acme, owner_user, acme_token, _, _ = tenants
    client.force_login(owner_user)
    ca, ca_key = make_ca("acme CA")
    code = identity.registration_code(acme)
    assert code.encode() in client.get("/identity/").content  # the portal shows it
    response = client.post(
        "/identity/",
        {
            "ca-name": "fleet",
            "ca-pem": pem_of(ca),
            "ca-verification_pem": pem_of(make_leaf(code, ca, ca_key)[0]),
        },
        REMOTE_ADDR="192.0.2.4",
    )
    assert response.status_code == 302, response.content[:500]
    assert client.post("/identity/cas/fleet/revoke/", REMOTE_ADDR="192.0.2.4").status_code == 302
    device_services.device_create(tenant=acme, name="sensor-9")
    device = Device.objects.get(tenant=acme, name="sensor-9")
    admin_change = admin_client.post(
        f"/admin/tenants/device/{device.id}/change/",
        {
            "tenant": acme.id,
            "name": "sensor-9",
            "enabled": "",
            "client_id_policy": "exact",
            "client_id_pattern": "",
            "attributes": "{}",
            "created_at_0": "2026-01-01",
            "created_at_1": "00:00:00",
            "credentials-TOTAL_FORMS": "0",
            "credentials-INITIAL_FORMS": "0",
        },
    )
    assert admin_change.status_code == 302, admin_change.content[-3000:]
    db = connection.settings_dict
    env = dict(
        os.environ,
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
    )
    made = subprocess.run(
        [sys.executable, "manage.py", "create_device", "acme", "from-cli"],
        cwd=settings.BASE_DIR,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    entries = list(AuditEntry.objects.filter(tenant_id=acme.id))
    portal = [e for e in entries if e.via == "portal"]
    assert {e.action for e in portal} >= {"cacertificate.created", "cacertificate.updated"}
    assert all(e.actor == owner_user.email and e.address == "192.0.2.4" for e in portal)
    assert any(e.via == "admin" and e.target == "sensor-9" for e in entries)
    command = [e for e in entries if e.via == "command"]
    assert any(e.action == "device.created" and e.target == "from-cli" for e in command)
    assert all("manage.py create_device" in e.actor for e in command)
    # Owners see it in the portal too; the page and the CSV name the CA.
    page = client.get("/audit/")
    assert page.status_code == 200 and b"cacertificate.created" in page.content
    assert b"fleet" in client.get("/audit.csv").content


def test_portal_security_headers_and_cookie_flags(tenants, client):
    page = client.get("/login/")
    assert page["X-Frame-Options"] == "DENY"
    assert page["X-Content-Type-Options"] == "nosniff"
    assert page["Referrer-Policy"] == "same-origin"
    policy = page["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in policy and "object-src 'none'" in policy
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy.split("style-src")[0]
    login = client.post("/login/", {"email": "owner@acme.io", "password": "pass-w0rd-acme"})
    assert login.status_code == 302
    session = login.cookies[settings.SESSION_COOKIE_NAME]
    assert session["httponly"] and session["samesite"] == "Lax"
    csrf = client.get("/login/").cookies.get(settings.CSRF_COOKIE_NAME)
    if csrf is not None:
        assert csrf["samesite"] == "Lax"
    # In production (DJANGO_DEBUG=0, HTTPS) the cookies are Secure and HSTS is on.
    production = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ.setdefault('DJANGO_SETTINGS_MODULE',"
            " 'control_plane.settings'); django.setup(); from django.conf import settings as s;"
            " print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SESSION_COOKIE_HTTPONLY,"
            " s.SECURE_HSTS_SECONDS > 0)",
        ],
        cwd=settings.BASE_DIR,
        env=dict(os.environ, DJANGO_DEBUG="0", SECRET_KEY="x" * 50, SEALING_KEY="y" * 50),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert production.stdout.split() == ["True", "True", "True", "True"], production.stderr


def test_bulk_writes_are_recorded_like_saves(tenants, client):
    """`QuerySet.update()` and `bulk_create` send no signals: a rotation's revoked secrets, the
    expiry sweep and any other bulk write must still reach the owner's log (API, CSV, portal),
    and only that owner's."""
    from datetime import timedelta

    from django.utils import timezone

    from tenants.models import AclRule, Credential

    acme, owner_user, acme_token, evil, evil_token = tenants
    owner = token_client(acme_token, "203.0.113.7")
    assert owner.post("/api/v1/devices", {"name": "sensor-1"}, format="json").status_code == 201
    device = Device.objects.get(tenant=acme, name="sensor-1")
    path = "/api/v1/devices/sensor-1/credentials"
    first = owner.post(path, {"grace_seconds": 0}, format="json").json()["id"]
    second = owner.post(path, {"grace_seconds": 0}, format="json").json()["id"]
    assert Credential.objects.get(id=first).revoked_at is not None  # revoked in bulk
    revoked = [
        e
        for e in owner.get("/api/v1/audit?limit=100").json()["results"]
        if e["action"] == "credential.updated" and e["target"] == f"sensor-1/{first}"
    ]
    assert revoked, "the secret the rotation revoked is not in the audit log"
    assert revoked[0]["detail"]["fields"] == ["revoked_at"] and revoked[0]["detail"]["revoked_at"]
    assert revoked[0]["actor"] == "owner@acme.io" and revoked[0]["address"] == "203.0.113.7"
    # The expiry sweep (Celery, no request): a bulk update by the system.
    Credential.objects.filter(id=second).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert device_services.credentials_expire() == 1
    swept = AuditEntry.objects.filter(
        tenant_id=acme.id, action="credential.updated", target=f"sensor-1/{second}"
    )
    assert any(e.detail.get("fields") == ["revoked_at"] and e.via == "system" for e in swept)
    # Any other bulk write of an audited model: update() and bulk_create().
    Device.objects.filter(tenant=acme).update(enabled=False)
    AclRule.objects.bulk_create(
        [AclRule(tenant=acme, action="publish", permission="deny", topic="secret/#")]
    )
    rows = list(csv.DictReader(io.StringIO(owner.get("/api/v1/audit.csv").content.decode())))
    disabled = [r for r in rows if r["action"] == "device.updated" and r["target"] == "sensor-1"]
    assert any(json.loads(r["detail"]).get("enabled") is False for r in disabled)
    assert any(r["action"] == "aclrule.created" and r["target"] == "secret/#" for r in rows)
    assert any(r["target"] == f"sensor-1/{first}" and "revoked_at" in r["detail"] for r in rows)
    # The portal shows them to the owner, with what changed, in words.
    client.force_login(owner_user)
    page = client.get("/audit/").content.decode()
    assert f"Secret {first} of device sensor-1 revoked" in page
    assert "ACL rule secret/# created" in page and "Device sensor-1 disabled" in page
    # Bookkeeping is not a change anyone made; the other tenant sees none of it.
    before = AuditEntry.objects.count()
    Device.objects.filter(id=device.id).update(last_seen_at=timezone.now())
    assert AuditEntry.objects.count() == before
    theirs = token_client(evil_token, "198.51.100.9").get("/api/v1/audit.csv").content.decode()
    assert "sensor-1" not in theirs and "secret/#" not in theirs

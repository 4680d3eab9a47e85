"""The REST API and portal holes of issue 20, from the attacker's side (Django's test client on the
real URL configuration and Postgres)."""

from __future__ import annotations

import json

import pytest
from django.core.cache import cache
from django.test import override_settings
from rest_framework.test import APIClient

from tenants.accounts import services as account_services
from tenants.models import ApiToken, Device
from tenants.tenant import services as tenant_services

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_throttles():
    cache.clear()
    yield
    cache.clear()


def api(token: str | None = None, **extra) -> APIClient:
    client = APIClient(**extra)
    if token:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def acme():
    tenant, _, token = account_services.signup(
        tenant="acme", email="owner@acme.io", password="pass-w0rd-acme"
    )
    return tenant, api(token)


# -- 1. patterns are validated when saved -------------------------------------------------------------


def test_catastrophic_regex_patterns_are_refused_at_save_time(acme):
    _, client = acme
    assert client.post("/api/v1/devices", {"name": "gw"}, format="json").status_code == 201
    evil = client.patch(
        "/api/v1/devices/gw",
        {"client_id_policy": "pattern", "client_id_pattern": "(a+)+$"},
        format="json",
    )
    assert evil.status_code == 400
    assert "client_id_pattern" in evil.json()["error"]["fields"]
    glob = client.patch(
        "/api/v1/devices/gw",
        {"client_id_policy": "pattern", "client_id_pattern": "gw-*"},
        format="json",
    )
    assert glob.status_code == 200 and glob.json()["client_id_pattern"] == "gw-*"


# -- 4. login throttles keyed on what the client cannot forge ------------------------------------------


@override_settings(AUTH_THROTTLE_RATE="5/min")
def test_rotating_x_forwarded_for_does_not_reset_the_token_throttle():
    account_services.signup(tenant="acme", email="owner@acme.io", password="pass-w0rd-acme")
    codes = [
        api()
        .post(
            "/api/v1/auth/token",
            {"email": "owner@acme.io", "password": f"guess-{i}"},
            format="json",
            HTTP_X_FORWARDED_FOR=f"10.9.{i}.{i}",
        )
        .status_code
        for i in range(12)
    ]
    assert codes[:5] == [401] * 5 and set(codes[5:]) == {429}


@override_settings(AUTH_THROTTLE_RATE="100/min", AUTH_ACCOUNT_THROTTLE_RATE="5/min")
def test_guesses_against_one_account_are_throttled_whatever_the_address():
    account_services.signup(tenant="acme", email="owner@acme.io", password="pass-w0rd-acme")
    codes = [
        api(REMOTE_ADDR=f"10.1.2.{i}")
        .post("/api/v1/auth/token", {"email": "Owner@acme.io", "password": "x"}, format="json")
        .status_code
        for i in range(8)
    ]
    assert codes[:5] == [401] * 5 and set(codes[5:]) == {429}


@override_settings(AUTH_THROTTLE_RATE="5/min")
def test_portal_login_is_throttled(client):
    account_services.signup(tenant="acme", email="owner@acme.io", password="pass-w0rd-acme")
    codes = [
        client.post(
            "/login/",
            {"email": "owner@acme.io", "password": f"guess-{i}"},
            HTTP_X_FORWARDED_FOR=f"10.0.0.{i}",
        ).status_code
        for i in range(8)
    ]
    assert codes[:5] == [200] * 5 and set(codes[5:]) == {429}
    blocked = client.post("/login/", {"email": "owner@acme.io", "password": "pass-w0rd-acme"})
    assert blocked.status_code == 429 and b"Too many" in blocked.content


@override_settings(AUTH_THROTTLE_RATE="5/min", TRUSTED_PROXIES=["127.0.0.1"])
def test_a_trusted_proxy_forwards_the_client_address():
    account_services.signup(tenant="acme", email="owner@acme.io", password="pass-w0rd-acme")
    codes = [
        api()
        .post(
            "/api/v1/auth/token",
            {"email": f"u{i}@acme.io", "password": "x"},
            format="json",
            HTTP_X_FORWARDED_FOR=f"10.9.0.{i}",
        )
        .status_code
        for i in range(8)
    ]
    assert codes == [401] * 8  # eight different clients behind the proxy


# -- 10. suspended tenants, bad input, schema, redirects ------------------------------------------------


def test_a_suspended_tenant_cannot_create_devices_or_tokens(acme, client):
    tenant, api_client = acme
    tenant_services.tenant_set_status(tenant, "suspended")
    device = api_client.post("/api/v1/devices", {"name": "late"}, format="json")
    token = api_client.post("/api/v1/tokens", {"name": "late"}, format="json")
    assert device.status_code == 403 and "suspended" in device.json()["error"]["message"]
    assert token.status_code == 403
    assert not Device.objects.filter(name="late").exists()
    assert not ApiToken.objects.filter(name="late").exists()
    client.force_login(tenant.memberships.first().user)
    page = client.post("/devices/", {"name": "late2", "client_id_policy": "exact"})
    assert page.status_code == 403
    assert not Device.objects.filter(name="late2").exists()


@pytest.mark.parametrize(
    "method, path, body",
    [
        ("post", "/api/v1/devices", {"name": "a\x00b"}),
        ("post", "/api/v1/devices", {"name": "d", "attributes": {"k": "v\x00"}}),
        ("get", "/api/v1/devices?name=a%00b", None),
        ("get", "/api/v1/devices?limit=99999999999999999999", None),
        ("get", "/api/v1/devices?offset=99999999999999999999", None),
        ("get", "/api/v1/usage?since=2024-13-45T99:00:00", None),
        ("get", "/api/v1/usage?since=9999-12-31T23:59:59-23:59", None),
        ("delete", "/api/v1/tokens/99999999999999999999999", None),
        ("delete", "/api/v1/acls/99999999999999999999999", None),
        (
            "post",
            "/api/v1/acls",
            {
                "action": "both",
                "permission": "deny",
                "topic": "x",
                "position": 99999999999999999999,
            },
        ),
        ("post", "/api/v1/devices/d0/credentials", {"expires_in": 99999999999999999999}),
        ("post", "/api/v1/devices/d0/credentials", {"expires_at": "10000-01-01T00:00:00Z"}),
        ("post", "/api/v1/devices", "DEEP"),
        ("patch", "/api/v1/tenant", {"name": "x\x00"}),
    ],
)
def test_bad_input_is_a_400_naming_the_problem(acme, method, path, body):
    _, client = acme
    client.post("/api/v1/devices", {"name": "d0"}, format="json")
    if body == "DEEP":
        data = "[" * 5000 + "]" * 5000
        response = client.generic("POST", path, data, content_type="application/json")
    elif body is None:
        response = getattr(client, method)(path)
    else:
        response = getattr(client, method)(path, json.dumps(body), content_type="application/json")
    assert response.status_code in (400, 404), (response.status_code, response.content[:300])
    error = response.json()["error"]
    assert error["message"]


def test_paginated_responses_are_documented():
    response = APIClient().get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    document = response.json()
    for path in (
        "/api/v1/devices",
        "/api/v1/tokens",
        "/api/v1/acls",
        "/api/v1/rules",
        "/api/v1/usage",
        "/api/v1/invoices",
        "/api/v1/devices/{name}/credentials",
    ):
        get = document["paths"][path]["get"]
        schema = get["responses"]["200"]["content"]["application/json"]["schema"]
        if "$ref" in schema:
            schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
        assert schema.get("type") == "object", path
        assert {"count", "next", "previous", "results"} <= set(schema["properties"]), path
        names = {p["name"] for p in get.get("parameters", [])}
        assert {"limit", "offset"} <= names, path


@pytest.mark.parametrize(
    "target", ["https://evil.example/", "//evil.example/x", "/\\evil.example", "https:evil.example"]
)
def test_no_open_redirect_after_portal_login(client, target):
    account_services.signup(tenant="acme", email="owner@acme.io", password="pass-w0rd-acme")
    response = client.post(
        f"/login/?next={target}", {"email": "owner@acme.io", "password": "pass-w0rd-acme"}
    )
    assert response.status_code == 302
    assert response["Location"] == "/"


def test_a_local_next_is_kept_after_login(client):
    account_services.signup(tenant="acme", email="owner@acme.io", password="pass-w0rd-acme")
    response = client.post(
        "/login/?next=/devices/", {"email": "owner@acme.io", "password": "pass-w0rd-acme"}
    )
    assert response["Location"] == "/devices/"

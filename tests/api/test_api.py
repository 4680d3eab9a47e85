"""The REST API as its users drive it: real HTTP requests through Django, a real Postgres."""

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings

from common.security import secrets
from tenants.accounts import services as account_services
from tenants.models import Credential, Membership
from tenants.tenant import services as tenant_services
from tests.api.conftest import client_for

pytestmark = pytest.mark.django_db


def test_contract_flow_signup_token_device_rotation():
    anonymous = client_for()
    signup = anonymous.post(
        "/api/v1/signup",
        {"tenant": "acme", "email": "me@acme.io", "password": "a long passphrase"},
        format="json",
    )
    assert signup.status_code == 201, signup.content
    assert signup.json()["tenant"]["slug"] == "acme" and signup.json()["token"]

    token = anonymous.post(
        "/api/v1/auth/token",
        {"email": "me@acme.io", "password": "a long passphrase"},
        format="json",
    )
    assert token.status_code == 200 and token.json()["tenant"] == "acme"
    api = client_for(token.json()["token"])

    created = api.post("/api/v1/devices", {"name": "sensor-1"}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["username"] == "acme/sensor-1" and len(body["password"]) >= 22
    assert "password" not in api.get("/api/v1/devices/sensor-1").json()

    rotated = api.post("/api/v1/devices/sensor-1/credentials", {}, format="json")
    assert rotated.status_code == 201
    new_secret = rotated.json()["password"]
    assert new_secret != body["password"]
    # The previous secret keeps working for the default grace period (24 h), and says so.
    [previous] = rotated.json()["previous"]
    assert previous["state"] == "retiring" and previous["expires_at"] and previous["active"]
    listed = api.get("/api/v1/devices/sensor-1/credentials").json()["results"]
    assert [(c["state"], c["active"]) for c in listed] == [("active", True), ("retiring", True)]
    assert listed[1]["expires_at"] == previous["expires_at"]
    assert all("password" not in c and "secret_hash" not in c for c in listed)

    # grace_seconds 0: the previous secrets are retired now.
    now = api.post("/api/v1/devices/sensor-1/credentials", {"grace_seconds": 0}, format="json")
    assert now.status_code == 201 and now.json()["previous"] == []
    active = [c for c in Credential.objects.filter(device__name="sensor-1") if c.is_active]
    assert len(active) == 1 and secrets.verify_secret(now.json()["password"], active[0].secret_hash)
    listed = api.get("/api/v1/devices/sensor-1/credentials").json()["results"]
    assert [c["state"] for c in listed] == ["active", "revoked", "revoked"]
    bad = api.post("/api/v1/devices/sensor-1/credentials", {"grace_seconds": -1}, format="json")
    assert bad.status_code == 400 and "grace_seconds" in bad.json()["error"]["fields"]


def test_devices_crud_pagination_and_filter(acme):
    _, api = acme
    for name in ("alpha-1", "alpha-2", "beta-1"):
        assert api.post("/api/v1/devices", {"name": name}, format="json").status_code == 201
    page = api.get("/api/v1/devices?limit=2").json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["next"]
    assert [d["name"] for d in api.get("/api/v1/devices?name=alpha").json()["results"]] == [
        "alpha-1",
        "alpha-2",
    ]
    patched = api.patch(
        "/api/v1/devices/beta-1", {"enabled": False, "attributes": {"floor": 2}}, format="json"
    )
    assert patched.status_code == 200 and patched.json()["enabled"] is False
    assert patched.json()["attributes"] == {"floor": 2}
    assert api.delete("/api/v1/devices/beta-1").status_code == 204
    assert api.get("/api/v1/devices/beta-1").status_code == 404


@pytest.mark.parametrize(
    "payload, field",
    [
        ({"name": "bad/name"}, "name"),
        ({"name": ""}, "name"),
        (
            {"name": "d1", "client_id_policy": "pattern", "client_id_pattern": "unfinished\\"},
            "client_id_pattern",
        ),
        ({"name": "d1", "client_id_policy": "sometimes"}, "client_id_policy"),
        ({"name": "d1", "colour": "red"}, "colour"),
    ],
)
def test_bad_device_input_is_400_with_message(acme, payload, field):
    _, api = acme
    response = api.post("/api/v1/devices", payload, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert field in error["fields"] and error["message"]


def test_duplicate_device_is_400(acme):
    _, api = acme
    api.post("/api/v1/devices", {"name": "d1"}, format="json")
    response = api.post("/api/v1/devices", {"name": "d1"}, format="json")
    assert response.status_code == 400 and "already exists" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    "payload, message",
    [
        ({"tenant": "sys", "email": "a@b.io", "password": "a long passphrase"}, "reserved"),
        ({"tenant": "Bad_Slug", "email": "a@b.io", "password": "a long passphrase"}, "lowercase"),
        (
            {"tenant": "fine-slug", "email": "not-an-email", "password": "a long passphrase"},
            "email",
        ),
        ({"tenant": "fine-slug", "email": "a@b.io", "password": "123"}, "password"),
    ],
)
def test_bad_signup_is_400(payload, message):
    response = client_for().post("/api/v1/signup", payload, format="json")
    assert response.status_code == 400
    assert message in str(response.json()["error"]).lower()


def test_duplicate_tenant_signup_is_400(acme):
    response = client_for().post(
        "/api/v1/signup",
        {"tenant": "acme", "email": "x@y.io", "password": "a long passphrase"},
        format="json",
    )
    assert response.status_code == 400 and "already exists" in response.json()["error"]["message"]


def test_wrong_password_for_token_is_401():
    account_services.signup(tenant="acme", email="me@acme.io", password="a long passphrase")
    response = client_for().post(
        "/api/v1/auth/token", {"email": "me@acme.io", "password": "nope"}, format="json"
    )
    assert response.status_code == 401 and "Wrong email or password" in str(response.json())


@pytest.mark.parametrize("header", ["Bearer mqp_notatoken", "Bearer", "Token abc"])
def test_missing_or_invalid_token_is_401(header):
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get("/api/v1/devices")
    assert response.status_code == 401 and response.json()["error"]["message"]
    assert response["WWW-Authenticate"] == "Bearer"
    assert APIClient().get("/api/v1/devices").status_code == 401


def test_session_auth_resolves_membership_and_x_tenant_picks_one(acme, attacker):
    from rest_framework.test import APIClient

    acme_tenant, acme_api = acme
    evil_tenant, _ = attacker
    acme_api.post("/api/v1/devices", {"name": "acme-dev"}, format="json")
    user = get_user_model().objects.get(username="owner@acme.io")
    Membership.objects.create(user=user, tenant=evil_tenant, role="viewer")
    browser = APIClient()
    browser.force_login(user)
    assert browser.get("/api/v1/tenant").json()["slug"] == "acme"
    picked = browser.get("/api/v1/tenant", HTTP_X_TENANT="evil").json()
    assert picked["slug"] == "evil" and picked["role"] == "viewer"
    assert browser.get("/api/v1/devices/acme-dev", HTTP_X_TENANT="evil").status_code == 404
    assert browser.get("/api/v1/devices", HTTP_X_TENANT="nobody").status_code == 403


def test_acl_crud_and_validation(acme):
    _, api = acme
    api.post("/api/v1/devices", {"name": "d1"}, format="json")
    created = api.post(
        "/api/v1/acls",
        {
            "device": "d1",
            "action": "publish",
            "permission": "allow",
            "topic": "${tenant}/${client}/#",
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    rule_id = created.json()["id"]
    assert api.get(f"/api/v1/acls/{rule_id}").json()["device"] == "d1"
    assert (
        api.patch(f"/api/v1/acls/{rule_id}", {"permission": "deny"}, format="json").json()[
            "permission"
        ]
        == "deny"
    )
    bad_topic = api.post(
        "/api/v1/acls", {"action": "both", "permission": "deny", "topic": "a/#/b"}, format="json"
    )
    assert bad_topic.status_code == 400 and "topic" in bad_topic.json()["error"]["fields"]
    bad_device = api.post(
        "/api/v1/acls",
        {"device": "ghost", "action": "both", "permission": "deny", "topic": "x"},
        format="json",
    )
    assert bad_device.status_code == 400
    assert api.delete(f"/api/v1/acls/{rule_id}").status_code == 204
    assert api.get("/api/v1/acls").json()["count"] == 0


@pytest.mark.parametrize(
    "sql, problem",
    [
        ('SELEC * FROM "a"', "SELECT"),
        ("SELECT * FROM a/b", "double quotes"),
        ('SELECT count( FROM "a"', "parentheses"),
        ('SELECT * FROM "a/#/b"', "Invalid topic filter"),
        ('SELECT * FROM "a" WHERE x = \'open', "Unterminated"),
        ('DELETE FROM "a"', "DELETE"),
    ],
)
def test_rule_sql_errors_name_the_problem(acme, sql, problem):
    _, api = acme
    response = api.post("/api/v1/rules", {"name": "r1", "sql": sql}, format="json")
    assert response.status_code == 400
    assert problem in response.json()["error"]["message"]


def test_rules_crud(acme):
    _, api = acme
    sql = 'SELECT payload.temp AS t FROM "sensors/+/temp" WHERE payload.temp > 30'
    created = api.post(
        "/api/v1/rules",
        {"name": "hot", "sql": sql, "actions": [{"type": "republish", "topic": "alerts/hot"}]},
        format="json",
    )
    assert created.status_code == 201, created.content
    assert api.get("/api/v1/rules/hot").json()["sql"] == sql
    assert (
        api.patch("/api/v1/rules/hot", {"enabled": False}, format="json").json()["enabled"] is False
    )
    bad_action = api.patch("/api/v1/rules/hot", {"actions": [{"type": "email"}]}, format="json")
    assert bad_action.status_code == 400
    assert api.delete("/api/v1/rules/hot").status_code == 204


def test_quota_reads_effective_limits_and_cannot_be_patched(acme):
    tenant, api = acme
    tenant_services.tenant_set_quota(tenant, {"max_connections": 3})
    quota = api.get("/api/v1/quota").json()
    assert quota["limits"]["max_connections"] == 3 and quota["overrides"] == {"max_connections": 3}
    assert set(quota["limits"]) >= {"max_publish_rate", "max_keepalive", "max_message_size"}
    assert api.patch("/api/v1/quota", {"max_connections": 10**6}, format="json").status_code == 405


def test_quota_says_how_often_each_limit_slowed_or_refused_in_the_last_hour_and_day(acme, attacker):
    """`throttling`: per window, each limit's slowdowns (not drops) and refusals with the last
    minute each happened, and the drops by cause; from the usage minutes the broker wrote, the
    tenant's own only."""
    from datetime import timedelta

    from django.utils import timezone

    from tenants.models import Usage

    tenant, api = acme
    tenant_services.tenant_set_quota(tenant, {"max_publish_rate": 100})
    now = timezone.now().replace(second=0, microsecond=0)
    recent, earlier = now - timedelta(minutes=2), now - timedelta(hours=3)
    Usage.objects.create(
        tenant=tenant,
        minute=recent,
        throttled={"publish_rate": 1234},
        dropped={"quota_publish_rate": 12, "queue_full": 3},
    )
    Usage.objects.create(
        tenant=tenant,
        minute=earlier,
        throttled={"outbound_rate": 5},
        dropped={"quota_connections": 2},
    )
    # The other tenant's storm in the same minute stays the other tenant's.
    Usage.objects.create(tenant=attacker[0], minute=recent, throttled={"publish_rate": 999})

    throttling = api.get("/api/v1/quota").json()["throttling"]

    hour = throttling["last_hour"]
    assert hour["limits"] == [
        {
            "limit": "publish_rate",
            "quota_key": "max_publish_rate",
            "value": 100,
            "slowed": 1234,
            "refused": 12,
            "last_slowed_at": recent.isoformat().replace("+00:00", "Z"),
            "last_refused_at": recent.isoformat().replace("+00:00", "Z"),
        }
    ]
    assert hour["dropped"] == {
        "messages": 15,
        "causes": {"quota_publish_rate": 12, "queue_full": 3},
    }
    day = throttling["last_24h"]
    assert [(x["limit"], x["slowed"], x["refused"]) for x in day["limits"]] == [
        ("publish_rate", 1234, 12),
        ("outbound_rate", 5, 0),
        ("connections", 0, 2),
    ]
    assert day["dropped"]["messages"] == 15  # refused connections are not messages
    assert day["dropped"]["causes"]["quota_connections"] == 2
    assert hour["from"] < hour["to"] and day["from"] < hour["from"]

    theirs = attacker[1].get("/api/v1/quota").json()["throttling"]
    assert [x["slowed"] for x in theirs["last_hour"]["limits"]] == [999]
    assert theirs["last_24h"]["dropped"] == {"messages": 0, "causes": {}}
    minutes = api.get("/api/v1/usage").json()["results"]
    assert {m["minute"][:16]: m["throttled"] for m in minutes}[recent.isoformat()[:16]] == {
        "publish_rate": 1234
    }


def test_usage_invoices_tenant_and_tokens(acme):
    _, api = acme
    assert api.get("/api/v1/usage").json()["count"] == 0
    assert api.get("/api/v1/usage?since=garbage").status_code == 400
    assert api.get("/api/v1/invoices").status_code == 200
    assert api.get("/api/v1/tenant").json() == {**api.get("/api/v1/tenant").json(), "role": "owner"}
    created = api.post("/api/v1/tokens", {"name": "ci"}, format="json")
    assert created.status_code == 201 and created.json()["token"].startswith("mqp_")
    second = client_for(created.json()["token"])
    assert second.get("/api/v1/devices").status_code == 200
    assert api.delete(f"/api/v1/tokens/{created.json()['id']}").status_code == 204
    assert second.get("/api/v1/devices").status_code == 401


def test_attacker_gets_404_for_every_object_of_another_tenant(acme, attacker):
    tenant, api = acme
    api.post("/api/v1/devices", {"name": "secret-device"}, format="json")
    acl_id = api.post(
        "/api/v1/acls", {"action": "both", "permission": "allow", "topic": "x"}, format="json"
    ).json()["id"]
    api.post("/api/v1/rules", {"name": "r1", "sql": 'SELECT * FROM "x"'}, format="json")
    credential_id = Credential.objects.get(device__name="secret-device").id
    _, evil = attacker
    attempts = [
        evil.get("/api/v1/devices/secret-device"),
        evil.patch("/api/v1/devices/secret-device", {"enabled": False}, format="json"),
        evil.delete("/api/v1/devices/secret-device"),
        evil.post("/api/v1/devices/secret-device/credentials", {}, format="json"),
        evil.get("/api/v1/devices/secret-device/credentials"),
        evil.delete(f"/api/v1/devices/secret-device/credentials/{credential_id}"),
        evil.get(f"/api/v1/acls/{acl_id}"),
        evil.patch(f"/api/v1/acls/{acl_id}", {"permission": "deny"}, format="json"),
        evil.delete(f"/api/v1/acls/{acl_id}"),
        evil.get("/api/v1/rules/r1"),
        evil.patch("/api/v1/rules/r1", {"enabled": False}, format="json"),
        evil.delete("/api/v1/rules/r1"),
    ]
    assert [r.status_code for r in attempts] == [404] * len(attempts)
    assert evil.get("/api/v1/devices").json()["count"] == 0
    assert evil.get("/api/v1/acls").json()["count"] == 0
    # And nothing changed on acme's side.
    assert api.get("/api/v1/devices/secret-device").json()["enabled"] is True
    assert Credential.objects.get(id=credential_id).revoked_at is None


def test_viewer_can_read_but_not_write(acme):
    tenant, api = acme
    api.post("/api/v1/devices", {"name": "d1"}, format="json")
    viewer = get_user_model().objects.create_user(
        "viewer@acme.io", "viewer@acme.io", "pass-w0rd-view"
    )
    Membership.objects.create(user=viewer, tenant=tenant, role="viewer")
    _, token = account_services.api_token_create(user=viewer, tenant=tenant)
    reader = client_for(token)
    assert reader.get("/api/v1/devices").status_code == 200
    writes = [
        reader.post("/api/v1/devices", {"name": "d2"}, format="json"),
        reader.patch("/api/v1/devices/d1", {"enabled": False}, format="json"),
        reader.delete("/api/v1/devices/d1"),
        reader.post("/api/v1/devices/d1/credentials", {}, format="json"),
        reader.post(
            "/api/v1/acls", {"action": "both", "permission": "deny", "topic": "x"}, format="json"
        ),
        reader.post("/api/v1/rules", {"name": "r", "sql": 'SELECT * FROM "x"'}, format="json"),
    ]
    assert [r.status_code for r in writes] == [403] * len(writes)
    assert "viewer" in writes[0].json()["error"]["message"]


@override_settings(AUTH_THROTTLE_RATE="3/min")
def test_auth_endpoints_are_throttled():
    codes = [
        client_for()
        .post("/api/v1/auth/token", {"email": "a@b.io", "password": "x"}, format="json")
        .status_code
        for _ in range(5)
    ]
    assert codes[:3] == [401, 401, 401] and codes[3:] == [429, 429]


@override_settings(DEBUG=False)
def test_openapi_schema_and_docs_render(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    document = schema.json()
    assert document["openapi"].startswith("3.")
    for path in (
        "/api/v1/signup",
        "/api/v1/auth/token",
        "/api/v1/devices",
        "/api/v1/devices/{name}",
        "/api/v1/devices/{name}/credentials",
        "/api/v1/quota",
        "/api/v1/acls",
        "/api/v1/rules",
    ):
        assert path in document["paths"], path
    assert client.get("/api/docs/").status_code == 200


def test_openapi_schema_generates_without_warnings():
    import io

    from django.core.management import call_command

    out = io.StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    assert "bearerAuth" in out.getvalue()


@override_settings(DEBUG=False)
def test_openapi_schema_describes_the_quota_throttling_object(client):
    document = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    schemas = document["components"]["schemas"]
    throttling = schemas["QuotaOutput"]["properties"]["throttling"]
    assert throttling["allOf"] == [{"$ref": "#/components/schemas/ThrottlingOutput"}]
    assert "throttling" in schemas["QuotaOutput"]["required"]
    assert set(schemas["ThrottlingOutput"]["properties"]) == {"last_hour", "last_24h"}
    window = schemas["ThrottlingWindowOutput"]
    assert set(window["properties"]) == {"from", "to", "limits", "dropped"}
    limit = schemas["LimitActivityOutput"]["properties"]
    assert {"limit", "quota_key", "value", "slowed", "refused", "last_slowed_at"} <= set(limit)
    assert "throttled" in schemas["UsageOutput"]["properties"]


def test_an_unexpected_error_is_the_api_error_shape_not_a_page(acme, monkeypatch):
    """A bug behind an endpoint answers 500 in the API's JSON error shape, without a traceback
    (issue 29: no Django debug page for whoever caused it)."""
    from tenants.rules import services as rule_services

    def broken(**kwargs):
        raise RuntimeError("secret internals at 10.0.0.7:5432")

    monkeypatch.setattr(rule_services, "rule_dry_run", broken)
    _, api = acme
    response = api.post("/api/v1/rules/test", {"sql": 'SELECT * FROM "#"'}, format="json")
    assert response.status_code == 500
    assert response.json() == {
        "error": {"code": "server_error", "message": "Internal error (it is logged)."}
    }
    assert b"10.0.0.7" not in response.content

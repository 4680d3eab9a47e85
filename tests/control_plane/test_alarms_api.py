"""Alarms through the REST API (issue 46), on real Postgres: definitions created (off until
enabled), checked part by part (a 400 names the field), changed (a new version when what is
evaluated changes), bounded by `max_alarms`; states listed active first with filters; an active
alarm acknowledged once (then a 409 that says its state), the transition recorded with who did
it; and, from the attacker's side, another tenant's definitions, states and history are 404s or
absent, by name and by id. The states and transitions are inserted as the live job will write
them (that job is not here)."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import quote

import pytest
from django.utils import timezone

from tenants.models import AlarmDefinition, AlarmState, AlarmTransition, AuditEntry, Membership
from tenants.tenant import services as tenant_services
from tests.api.conftest import acme, attacker, client_for  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db

HOT = {"name": "hot", "source": "sensors/+/temp", "raise_condition": "payload.temp > 90"}


def define(api, **fields):
    response = api.post("/api/v1/alarms", {**HOT, **fields}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def state_row(tenant, definition, key, status, *, ago=0, value=None, cause=None):
    """A state as the live job writes it."""
    since = timezone.now() - timedelta(minutes=ago)
    return AlarmState.objects.create(
        tenant=tenant,
        definition=definition,
        key=key,
        status=status,
        since=since,
        value=value,
        cause=cause,
        raised_at=since if status in ("active", "acknowledged") else None,
    )


def transition_row(state, event, before, after, *, ago=0, message_id=None):
    return AlarmTransition.objects.create(
        tenant_id=state.tenant_id,
        definition_id=state.definition_id,
        key=state.key,
        event=event,
        before=before,
        after=after,
        at=timezone.now() - timedelta(minutes=ago),
        value=state.value,
        message_id=message_id,
    )


def refusal(response, status=400):
    assert response.status_code == status, response.content
    return response.json()["error"]


def test_a_definition_is_created_off_read_listed_and_taken_by_contract_names(acme):  # noqa: F811
    _, api = acme
    body = define(api, raise_for_seconds=60, severity="critical", value="payload.temp")
    assert body["enabled"] is False and body["version"] == 1
    assert (body["key"], body["clear_for_seconds"], body["no_data_keys"], body["seen_days"]) == (
        "clientid",
        None,
        "seen",
        7,
    )
    assert api.get("/api/v1/alarms/hot").json()["raise_for_seconds"] == 60
    assert [d["name"] for d in api.get("/api/v1/alarms").json()["results"]] == ["hot"]
    # CONTRACT.md's names for the same fields; the brief's path for the same resource.
    short = api.post(
        "/api/v1/alarm-definitions",
        {"name": "silent", "source": "sensors/#", "no_data_seconds": 300, "raise": "",
         "for_seconds": 0, "notify": [{"type": "webhook", "url": "https://example.com/hook"}]},
        format="json",
    )  # fmt: skip
    assert short.status_code == 201, short.content
    [hook] = short.json()["notifications"]
    assert hook["kind"] == "webhook" and hook["target"] == "https://example.com/hook"
    assert hook["on"] == ["raise", "acknowledge", "clear"] and len(hook["secret"]) >= 16
    assert api.get("/api/v1/alarm-definitions/silent").json()["no_data_seconds"] == 300
    entry = AuditEntry.objects.filter(action="alarm.created").order_by("id").first()
    assert entry.target == "hot"


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"raise_condition": "payload.temp >"}, "raise_condition", "not an expression"),
        ({"source": "sensors/#/temp"}, "source", ""),
        ({"source": "$events/nope"}, "source", "not a lifecycle source"),
        ({"raise_condition": ""}, "raise_condition", "give a raise condition, a no-data window"),
        ({"key": "payload.site +"}, "key", "not an expression"),
        ({"clear_condition": "payload.temp <"}, "clear_condition", "not an expression"),
        ({"no_data_seconds": 5}, "no_data_seconds", "from 10"),
        ({"raise_for_seconds": -1}, "raise_for_seconds", ""),
        ({"severity": "loud"}, "severity", ""),
        ({"seen_days": 31}, "seen_days", ""),
        ({"renotify_seconds": 30}, "renotify_seconds", ""),
        ({"name": "no spaces"}, "name", "letters, digits"),
        ({"name": "states"}, "name", "reserved"),
        ({"notifications": [{"kind": "sms", "target": "x"}]}, "notifications", "kind must be"),
        ({"notifications": [{"kind": "email", "target": "nope"}]}, "notifications", "email"),
        ({"notifications": [{"kind": "webhook", "target": "ftp://x.io"}]}, "notifications", "url"),
        ({"notifications": [{"kind": "republish", "target": "a/+"}]}, "notifications", "topic"),
        (
            {"notifications": [{"kind": "email", "target": "a@b.io", "on": ["boom"]}]},
            "notifications",
            "on must list",
        ),  # fmt: skip
        ({"colour": "red"}, "colour", "Unknown field"),
    ],
)
def test_a_bad_part_is_a_400_naming_its_field(acme, fields, field, words):  # noqa: F811
    _, api = acme
    error = refusal(api.post("/api/v1/alarms", {**HOT, **fields}, format="json"))
    assert error["code"] == "invalid" and field in error["fields"], error
    assert words.lower() in str(error["fields"][field]).lower(), error
    assert not AlarmDefinition.objects.exists()


def test_a_name_is_taken_once_per_tenant_but_by_each_tenant(acme, attacker):  # noqa: F811
    _, api = acme
    _, evil = attacker
    define(api)
    error = refusal(api.post("/api/v1/alarms", HOT, format="json"))
    assert error["fields"] == {"name": ["An alarm named 'hot' already exists."]}
    define(evil)  # the same name in another tenant
    assert AlarmDefinition.objects.filter(name="hot").count() == 2


def test_changes_version_what_is_evaluated_and_put_resets_what_it_leaves_out(acme):  # noqa: F811
    _, api = acme
    define(api, notifications=[{"kind": "webhook", "target": "https://example.com/h"}])
    secret = api.get("/api/v1/alarms/hot").json()["notifications"][0]["secret"]
    patched = api.patch("/api/v1/alarms/hot", {"severity": "minor", "enabled": True}, format="json")
    assert patched.status_code == 200, patched.content
    assert (patched.json()["severity"], patched.json()["enabled"], patched.json()["version"]) == (
        "minor",
        True,
        1,
    )
    patched = api.patch("/api/v1/alarms/hot", {"raise_for_seconds": 30}, format="json").json()
    assert patched["version"] == 2 and patched["notifications"][0]["secret"] == secret
    error = refusal(api.patch("/api/v1/alarms/hot", {"raise": "payload.t >"}, format="json"))
    assert "raise_condition" in error["fields"]
    replaced = api.put(
        "/api/v1/alarms/hot", {"source": "sensors/#", "no_data_seconds": 60}, format="json"
    ).json()
    assert (replaced["raise_condition"], replaced["severity"], replaced["enabled"]) == (
        "",
        "major",
        False,
    )
    assert replaced["notifications"] == [] and replaced["version"] == 3
    assert refusal(api.put("/api/v1/alarms/hot", {"name": "x", **HOT}, format="json"))
    assert api.delete("/api/v1/alarms/hot").status_code == 204
    assert api.get("/api/v1/alarms/hot").status_code == 404


def test_max_alarms_refuses_one_more_in_words(acme):  # noqa: F811
    tenant, api = acme
    tenant_services.tenant_set_quota(tenant, {"max_alarms": 1})
    define(api)
    error = refusal(api.post("/api/v1/alarms", {**HOT, "name": "two"}, format="json"), 403)
    assert error["code"] == "quota_exceeded"
    assert (error["quota"], error["limit"]) == ("max_alarms", 1)
    assert "allows 1 alarm definition (max_alarms)" in error["message"]
    assert AlarmDefinition.objects.filter(tenant=tenant).count() == 1
    quota = api.get("/api/v1/quota").json()
    assert quota["limits"]["max_alarms"] == 1 and "max_alarm_keys" in quota["limits"]


def test_states_are_listed_active_first_and_filtered(acme):  # noqa: F811
    tenant, api = acme
    hot = AlarmDefinition.objects.get(id=AlarmDefinition.objects.create(
        tenant=tenant, name="hot", source="t/#", raise_condition="payload.t > 1", severity="critical"
    ).id)  # fmt: skip
    quiet = AlarmDefinition.objects.create(
        tenant=tenant, name="quiet", source="t/#", no_data_seconds=60, severity="warning"
    )
    state_row(tenant, hot, "d1", "normal", ago=1)
    state_row(tenant, hot, "d2", "active", ago=30, value=95, cause="condition")
    state_row(tenant, hot, "d3", "pending", ago=2)
    state_row(tenant, quiet, "d1", "acknowledged", ago=5, cause="no_data")
    state_row(tenant, quiet, "d4", "active", ago=3, cause="no_data")

    rows = api.get("/api/v1/alarms/states").json()["results"]
    assert [(r["alarm"], r["key"], r["state"]) for r in rows] == [
        ("quiet", "d4", "active"),  # active, the most recent first
        ("hot", "d2", "active"),
        ("quiet", "d1", "acknowledged"),
        ("hot", "d3", "pending"),
        ("hot", "d1", "normal"),
    ]
    assert rows[1]["value"] == 95 and rows[1]["severity"] == "critical"
    assert {"id", "alarm", "key", "state", "raised_at", "value", "since"} <= set(rows[0])

    def keys(query):
        return [(r["alarm"], r["key"]) for r in api.get(f"/api/v1/alarms/states?{query}").json()["results"]]  # fmt: skip

    assert keys("state=active") == [("quiet", "d4"), ("hot", "d2")]
    assert keys("severity=warning") == [("quiet", "d4"), ("quiet", "d1")]
    assert keys("device=d1") == [("quiet", "d1"), ("hot", "d1")]
    assert keys("alarm=hot&state=pending") == [("hot", "d3")]
    assert keys("device=nobody") == []
    assert "state" in refusal(api.get("/api/v1/alarms/states?state=burning"))["fields"]
    assert "severity" in refusal(api.get("/api/v1/alarms/states?severity=loud"))["fields"]


def test_acknowledge_once_then_409_with_the_transition_recorded(acme):  # noqa: F811
    tenant, api = acme
    hot = AlarmDefinition.objects.create(tenant=tenant, name="hot", source="t/#", raise_condition="payload.t > 1")  # fmt: skip
    state = state_row(tenant, hot, "dev/1", "active", ago=10, value=97, cause="condition")
    raised = transition_row(state, "raise", "normal", "active", ago=10, message_id="seg-1:4")

    done = api.post(f"/api/v1/alarms/states/{state.id}/acknowledge", {"note": "on it"}, format="json")  # fmt: skip
    assert done.status_code == 200, done.content
    body = done.json()
    assert (body["state"], body["acknowledged_by"]) == ("acknowledged", "owner@acme.io")
    [ack] = AlarmTransition.objects.filter(event="acknowledge")
    assert (ack.before, ack.after, ack.by, ack.note, ack.key) == (
        "active", "acknowledged", "owner@acme.io", "on it", "dev/1"
    )  # fmt: skip
    assert ack.value == 97 and ack.cause == "condition"

    again = refusal(api.post(f"/api/v1/alarms/states/{state.id}/acknowledge"), 409)
    assert again["code"] == "conflict" and again["state"] == "acknowledged"
    assert "is acknowledged, not active" in again["message"]
    by_key = f"/api/v1/alarms/hot/states/{quote('dev/1')}"
    assert refusal(api.post(f"{by_key}/acknowledge", {}, format="json"), 409)["state"] == "acknowledged"  # fmt: skip
    assert AlarmTransition.objects.filter(event="acknowledge").count() == 1

    history = api.get(f"/api/v1/alarms/states/{state.id}/history").json()["results"]
    assert [(h["event"], h["by"]) for h in history] == [("acknowledge", "owner@acme.io"), ("raise", None)]  # fmt: skip
    assert history[1]["message_id"] == raised.message_id
    assert api.get(f"{by_key}/history").json()["results"] == history
    assert api.get(by_key).json()["state"] == "acknowledged"
    device = api.get("/api/v1/alarms/history?device=dev/1").json()["results"]
    assert [h["event"] for h in device] == ["acknowledge", "raise"]
    assert "device" in refusal(api.get("/api/v1/alarms/history"))["fields"]


def test_a_normal_or_pending_alarm_cannot_be_acknowledged(acme):  # noqa: F811
    tenant, api = acme
    hot = AlarmDefinition.objects.create(tenant=tenant, name="hot", source="t/#", raise_condition="payload.t > 1")  # fmt: skip
    for status in ("normal", "pending"):
        state = state_row(tenant, hot, f"k-{status}", status)
        error = refusal(api.post(f"/api/v1/alarms/states/{state.id}/acknowledge"), 409)
        assert error["state"] == status
    assert not AlarmTransition.objects.exists()


def test_the_attacker_reaches_nothing_of_another_tenants_alarms(acme, attacker):  # noqa: F811
    tenant, api = acme
    _, evil = attacker
    define(api, notifications=[{"kind": "email", "target": "ops@acme.io"}])
    hot = AlarmDefinition.objects.get(tenant=tenant, name="hot")
    state = state_row(tenant, hot, "d1", "active", cause="condition")
    transition_row(state, "raise", "normal", "active")

    assert evil.get("/api/v1/alarms").json()["count"] == 0
    assert evil.get("/api/v1/alarm-definitions").json()["count"] == 0
    assert evil.get("/api/v1/alarms/states").json()["count"] == 0
    assert evil.get("/api/v1/alarms/states?alarm=hot&device=d1").json()["count"] == 0
    assert evil.get("/api/v1/alarms/history?device=d1").json()["count"] == 0
    for method, path, body in [
        ("get", "/api/v1/alarms/hot", None),
        ("get", "/api/v1/alarm-definitions/hot", None),
        ("patch", "/api/v1/alarms/hot", {"enabled": True}),
        ("put", "/api/v1/alarms/hot", {"source": "#", "raise_condition": "true"}),
        ("delete", "/api/v1/alarms/hot", None),
        ("get", f"/api/v1/alarms/states/{state.id}", None),
        ("post", f"/api/v1/alarms/states/{state.id}/acknowledge", {"note": "mine now"}),
        ("get", f"/api/v1/alarms/states/{state.id}/history", None),
        ("get", "/api/v1/alarms/hot/states/d1", None),
        ("post", "/api/v1/alarms/hot/states/d1/acknowledge", {}),
        ("get", "/api/v1/alarms/hot/states/d1/history", None),
    ]:
        response = getattr(evil, method)(path, body, format="json")
        assert response.status_code == 404, (method, path, response.content)
    hot.refresh_from_db()
    state.refresh_from_db()
    assert (hot.enabled, hot.source, hot.version) == (False, "sensors/+/temp", 1)
    assert state.status == "active" and state.acknowledged_by is None
    assert AlarmTransition.objects.filter(event="acknowledge").count() == 0
    assert client_for().get("/api/v1/alarms").status_code in (401, 403)


def test_a_viewer_reads_but_neither_defines_nor_acknowledges(acme):  # noqa: F811
    from django.contrib.auth import get_user_model

    from tenants.accounts import login_tokens

    tenant, api = acme
    define(api, notifications=[{"kind": "webhook", "target": "https://example.com/h"}])
    hot = AlarmDefinition.objects.get(tenant=tenant, name="hot")
    state = state_row(tenant, hot, "d1", "active")
    viewer = get_user_model().objects.create_user("v@acme.io", "v@acme.io", "pass-w0rd-view")
    Membership.objects.create(user=viewer, tenant=tenant, role="viewer")
    eyes = client_for(login_tokens.login_token(user=viewer, tenant=tenant))
    assert eyes.get("/api/v1/alarms/hot").json()["notifications"][0]["secret"] == "********"
    assert eyes.get("/api/v1/alarms/states").json()["count"] == 1
    assert eyes.post("/api/v1/alarms", {**HOT, "name": "x"}, format="json").status_code == 403
    assert eyes.post(f"/api/v1/alarms/states/{state.id}/acknowledge").status_code == 403
    state.refresh_from_db()
    assert state.status == "active"

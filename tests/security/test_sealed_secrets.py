"""Rules' webhook secrets sealed at rest (`common.security.sealed`), from the side of someone holding a copy
of the database: the rows hold no secret that signs, another key opens nothing, and the platform
itself (the API for members who may write, the rule jobs) still has them in the clear."""

import importlib
from types import SimpleNamespace

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection

from common.security import sealed
from common.stores.object_store import LocalObjectStore
from spark.rules import store as rules_store
from spark.rules.actions import ActionRunner, Job
from tenants.accounts import services as account_services
from tenants.models import Rule
from tests.api.conftest import client_for
from tests.spark.conftest import database_url

pytestmark = pytest.mark.django_db(transaction=True)

SECRET = "a-webhook-secret-only-acme-has-0123456789"
HOOK = {"type": "webhook", "url": "https://hooks.example.com/in", "secret": SECRET}


@pytest.fixture
def acme():
    tenant, _, token = account_services.signup(
        tenant="acme", email="owner@acme.io", password="pass-w0rd-acme"
    )
    return tenant, client_for(token)


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("SEALING_KEY", "the-platforms-sealing-key-" + "k" * 40)
    monkeypatch.delenv("SEALING_KEY_PREVIOUS", raising=False)


def stored() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT actions::text FROM tenants_rule WHERE name = 'hot'")
        return cursor.fetchone()[0]


def stored_secret() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT actions->0->>'secret' FROM tenants_rule WHERE name = 'hot'")
        return cursor.fetchone()[0]


def jobs_view() -> dict:
    with rules_store.connect(database_url()) as conn:
        [spec] = rules_store.load_rules(conn, rule="hot", enabled_only=False)
    return spec.actions[0]


def create_rule(acme) -> None:
    _, api = acme
    body = {"name": "hot", "sql": 'SELECT * FROM "t/#"', "actions": [HOOK]}
    response = api.post("/api/v1/rules", body, format="json")
    assert response.status_code == 201, response.content


def test_a_database_copy_holds_no_webhook_secret_but_the_platform_has_it(acme):
    create_rule(acme)
    assert SECRET not in stored()
    assert stored_secret().startswith("sealed:v1:")
    _, api = acme
    assert api.get("/api/v1/rules/hot").json()["actions"] == [HOOK]  # a member who may write
    assert Rule.objects.get(name="hot").actions == [HOOK]
    assert jobs_view() == HOOK  # the rule jobs sign with it
    # Saved again (a PATCH of something else) it stays sealed, sealed once.
    api.patch("/api/v1/rules/hot", {"enabled": False}, format="json")
    assert stored_secret().startswith("sealed:v1:") and SECRET not in stored()
    assert jobs_view() == HOOK


def test_another_key_opens_nothing_and_the_job_sends_no_unsigned_call(acme, monkeypatch):
    create_rule(acme)
    monkeypatch.setenv("SEALING_KEY", "an-attackers-guess-" + "x" * 40)
    with pytest.raises(sealed.SealError):
        sealed.unseal(stored_secret())
    seen = jobs_view()
    assert seen["secret"] == stored_secret() and SECRET not in str(seen)
    runner = ActionRunner(LocalObjectStore("/nonexistent-never-written"))
    try:
        job = Job(1, "acme", "$rules-1-", seen, {"t": 1}, 0)
        [outcome] = runner.run([job])
    finally:
        runner.close()
    assert not outcome.ok and "SEALING_KEY" in outcome.error  # failed, counted, no call made


def test_a_key_rotation_with_reseal_secrets(acme, monkeypatch):
    create_rule(acme)
    before = stored_secret()
    old = "the-platforms-sealing-key-" + "k" * 40
    monkeypatch.setenv("SEALING_KEY", "the-new-sealing-key-" + "n" * 40)
    monkeypatch.setenv("SEALING_KEY_PREVIOUS", old)
    assert jobs_view() == HOOK  # both keys open during the rotation
    call_command("reseal_secrets", stdout=SimpleNamespace(write=lambda _text: None))
    after = stored_secret()
    assert after != before and after.startswith("sealed:v1:")
    monkeypatch.delenv("SEALING_KEY_PREVIOUS")
    assert jobs_view() == HOOK  # the new key alone opens it now
    assert Rule.objects.get(name="hot").actions == [HOOK]


def test_secrets_stored_in_the_clear_before_are_sealed_by_the_migration(acme):
    create_rule(acme)
    with connection.cursor() as cursor:  # as the code before sealing stored them
        cursor.execute(
            "UPDATE tenants_rule SET actions = jsonb_set(actions, '{0,secret}', to_jsonb(%s::text))"
            " WHERE name = 'hot'",
            [SECRET],
        )
    assert stored_secret() == SECRET
    assert jobs_view() == HOOK  # readable meanwhile
    migration = importlib.import_module("tenants.migrations.0012_sealed_webhook_secrets")
    migration.seal_stored(apps, SimpleNamespace(connection=connection))
    assert stored_secret().startswith("sealed:v1:") and SECRET not in stored()
    assert jobs_view() == HOOK

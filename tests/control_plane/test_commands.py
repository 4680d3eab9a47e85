"""The operator commands as operators run them: `python manage.py ...` in a subprocess, JSON out."""

import json
import os
import subprocess
import sys

import pytest
from django.conf import settings
from django.db import connection

from common.security import secrets
from tenants.models import AclRule, Credential, Tenant

pytestmark = pytest.mark.django_db(transaction=True)


def manage(*args: str) -> subprocess.CompletedProcess:
    db = settings.DATABASES["default"]
    env = dict(os.environ)
    env["DATABASE_URL"] = (
        f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{connection.settings_dict['NAME']}"
    )
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=settings.BASE_DIR,
    )


def test_create_tenant_device_quota_acl_flow():
    result = manage("create_tenant", "acme", "--plan", "pro")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["slug"] == "acme"

    result = manage("create_device", "acme", "sensor-1", "--client-ids", "any")
    assert result.returncode == 0, result.stderr
    device = json.loads(result.stdout)
    assert device["username"] == "acme/sensor-1"
    stored = Credential.objects.get(device__name="sensor-1")
    assert secrets.verify_secret(device["password"], stored.secret_hash)

    result = manage("set_quota", "acme", "max_connections=7", "max_keepalive=60")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["quota"]["max_connections"] == 7
    assert Tenant.objects.get(slug="acme").quota_overrides == {
        "max_connections": 7,
        "max_keepalive": 60,
    }

    result = manage(
        "add_acl",
        "acme",
        "--device",
        "sensor-1",
        "--action",
        "publish",
        "--topic",
        "devices/${client}/#",
        "--allow",
    )
    assert result.returncode == 0, result.stderr
    rule = AclRule.objects.get(id=json.loads(result.stdout)["id"])
    assert (rule.device.name, rule.permission, rule.topic) == (
        "sensor-1",
        "allow",
        "devices/${client}/#",
    )


def test_create_device_with_given_password():
    manage("create_tenant", "acme")
    result = manage("create_device", "acme", "gw", "--password", "a-long-enough-secret")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["password"] == "a-long-enough-secret"


@pytest.mark.parametrize(
    "args, message",
    [
        (("create_device", "nope", "d1"), "Unknown tenant 'nope'"),
        (("set_quota", "nope", "max_connections=1"), "Unknown tenant 'nope'"),
        (("create_tenant", "sys"), "reserved"),
        (("create_tenant", "Bad_Slug"), "lowercase"),
    ],
)
def test_clear_errors_and_nonzero_exit(args, message):
    result = manage(*args)
    assert result.returncode != 0
    assert message in result.stderr


def test_duplicate_device_and_bad_quota_key_fail():
    manage("create_tenant", "acme")
    assert manage("create_device", "acme", "d1").returncode == 0
    duplicate = manage("create_device", "acme", "d1")
    assert duplicate.returncode != 0 and "already exists" in duplicate.stderr
    bad_key = manage("set_quota", "acme", "max_widgets=3")
    assert bad_key.returncode != 0 and "Unknown quota key" in bad_key.stderr
    bad_value = manage("set_quota", "acme", "max_connections=lots")
    assert bad_value.returncode != 0 and "whole number" in bad_value.stderr
    bad_topic = manage("add_acl", "acme", "--action", "both", "--topic", "a/#/b", "--deny")
    assert bad_topic.returncode != 0 and "topic" in bad_topic.stderr


def test_makemigrations_is_clean():
    result = manage("makemigrations", "--check", "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr

"""schemathesis against the OpenAPI document (issue 20, point 3): every operation, generated
requests (valid and not), as a tenant owner with a real token, in-process through the WSGI app on
the test Postgres. No 5xx, and every documented response matches its schema. Bounded: a few
examples per operation, no shrinking, no deadline."""

from __future__ import annotations

import sys
from collections import Counter

import pytest
import schemathesis
from django.core import signals
from django.core.cache import cache
from django.db import close_old_connections
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import response_schema_conformance

from tenants.accounts import services as account_services
from tenants.acls import services as acl_services
from tenants.devices import services as device_services

EXAMPLES = 6  # per operation (~107 operations): about a minute on a quiet machine
TOKEN: dict[str, str] = {}
STATUSES: Counter = Counter()


@pytest.fixture(autouse=True)
def owner(db):
    cache.clear()
    tenant, _, token = account_services.signup(
        tenant="acme", email="owner@acme.io", password="pass-w0rd-acme"
    )
    device_services.device_create(tenant=tenant, name="sensor-1")
    acl_services.acl_add(tenant=tenant, action="both", permission="allow", topic="t/#")
    TOKEN["value"] = token
    # Requests go through the WSGI handler, which closes the database connection at the end of
    # each one; the test's transaction lives on that connection (Django's test client does the
    # same disconnection).
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def _schema():
    from control_plane.wsgi import application

    return schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)


schema = _schema()


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
    suppress_health_check=list(HealthCheck),
)
def test_api_conforms_to_its_schema(case):
    response = case.call_and_validate(
        headers={"Authorization": f"Bearer {TOKEN['value']}"},
        checks=[not_a_server_error, response_schema_conformance],
    )
    STATUSES[response.status_code // 100 * 100] += 1


def teardown_module(module):
    """The figures for bench/RESULTS.md (pytest -s shows them)."""
    print(f"\nschemathesis: {sum(STATUSES.values())} cases, {dict(STATUSES)}", file=sys.stderr)

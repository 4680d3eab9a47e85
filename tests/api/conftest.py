import pytest
from django.core.cache import cache
from rest_framework.test import APIClient

from tenants.accounts import services as account_services


@pytest.fixture(autouse=True)
def _fresh_throttles():
    cache.clear()
    yield
    cache.clear()


def client_for(token: str | None = None) -> APIClient:
    client = APIClient()
    if token:
        client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def acme(db):
    """Tenant acme with an owner; yields (tenant, authenticated client)."""
    tenant, _, token = account_services.signup(
        tenant="acme", email="owner@acme.io", password="pass-w0rd-acme"
    )
    return tenant, client_for(token)


@pytest.fixture
def attacker(db):
    """Another tenant's owner, trying to reach acme's objects."""
    tenant, _, token = account_services.signup(
        tenant="evil", email="owner@evil.io", password="pass-w0rd-evil"
    )
    return tenant, client_for(token)

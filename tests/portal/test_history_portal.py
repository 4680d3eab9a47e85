"""The History page through Django's test client: another tenant's policy cannot be deleted
from it (404), and a viewer sees policies but cannot add or delete one."""

import pytest
from django.contrib.auth import get_user_model

from tenants.accounts import services as account_services
from tenants.history.services import history_policy_create
from tenants.models import HistoryPolicy, Membership

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _store(tmp_path, monkeypatch):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())


def test_another_tenants_policy_is_404_and_a_viewer_only_reads(client):
    acme, _, _ = account_services.signup(
        tenant="acme", email="me@acme.io", password="a long passphrase"
    )
    theirs = history_policy_create(tenant=acme, topic_filter="secret/#", days=1)
    evil, attacker, _ = account_services.signup(
        tenant="evil", email="x@evil.io", password="a long pass"
    )
    client.force_login(attacker)
    page = client.get("/history/")
    assert page.status_code == 200 and b"secret/#" not in page.content
    assert client.post(f"/history/{theirs.id}/delete/").status_code == 404
    assert HistoryPolicy.objects.filter(id=theirs.id).exists()

    viewer = get_user_model().objects.create_user("v@acme.io", "v@acme.io", "pass-w0rd-view")
    Membership.objects.create(user=viewer, tenant=acme, role="viewer")
    client.force_login(viewer)
    page = client.get("/history/")
    assert b"secret/#" in page.content and b"Add policy" not in page.content
    assert client.post("/history/", {"topic_filter": "x/#", "days": 1}).status_code == 403
    assert client.post(f"/history/{theirs.id}/delete/").status_code == 403
    assert HistoryPolicy.objects.count() == 1

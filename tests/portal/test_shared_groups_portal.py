"""The Shared groups page through Django's test client (issue 45): the tenant's groups with what
each holds and a Delete per group that deletes it with its messages; another tenant's group is
a 404 and stays; a viewer sees the groups but no form. And the quota page names the group quotas,
as it names every quota key."""

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from common.contracts.quota_keys import QUOTA_KEYS
from tenants.accounts import services as account_services
from tenants.models import Membership, MqttQueuedMessage, SharedGroupQueue
from tenants.usage.quota_display import LIMITS
from tests.control_plane.test_shared_groups_api import group_row

pytestmark = pytest.mark.django_db
PASSWORD = "a long passphrase"


def test_the_page_lists_groups_and_deletes_one_with_its_messages(client):
    acme, owner, _ = account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    doomed = group_row(acme, "workers", "jobs/#", held=[timezone.now()] * 2)
    group_row(acme, "alarms", "alarms/+", members=3)
    client.force_login(owner)
    html = client.get("/shared-groups/").content.decode()
    assert 'data-group="workers" data-filter="jobs/#"' in html
    row = html[html.index('data-group="workers"') :]
    row = row[: row.index("</tr>")]
    assert '<td class="num depth">2</td>' in row and '<td class="num members">0</td>' in row
    assert 'action="/shared-groups/delete/"' in row
    assert 'href="/shared-groups/" aria-current="page"' in html  # in the navigation

    page = client.post(
        "/shared-groups/delete/", {"group": "workers", "filter": "jobs/#"}, follow=True
    )
    assert "Deleted the shared group $share/workers/jobs/#." in page.content.decode()
    assert not SharedGroupQueue.objects.filter(id=doomed.id).exists()
    assert not MqttQueuedMessage.objects.filter(client_id=doomed.holder_id).exists()
    assert SharedGroupQueue.objects.filter(tenant=acme).count() == 1
    refused = client.post("/shared-groups/delete/", {"group": "alarms"}, follow=True)
    assert "Nothing deleted: a topic filter is required" in refused.content.decode()
    assert SharedGroupQueue.objects.filter(tenant=acme).count() == 1


def test_another_tenants_group_is_404_and_a_viewer_only_reads(client):
    acme, _, _ = account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    theirs = group_row(acme, "secret-workers", "jobs/#", held=[timezone.now()] * 1)
    _, attacker, _ = account_services.signup(tenant="evil", email="x@evil.io", password=PASSWORD)
    client.force_login(attacker)
    page = client.get("/shared-groups/")
    assert page.status_code == 200 and b"secret-workers" not in page.content
    gone = client.post("/shared-groups/delete/", {"group": "secret-workers", "filter": "jobs/#"})
    assert gone.status_code == 404
    assert SharedGroupQueue.objects.filter(id=theirs.id).exists()
    assert MqttQueuedMessage.objects.filter(client_id=theirs.holder_id).count() == 1

    viewer = get_user_model().objects.create_user("v@acme.io", "v@acme.io", PASSWORD)
    Membership.objects.create(user=viewer, tenant=acme, role="viewer")
    client.force_login(viewer)
    page = client.get("/shared-groups/").content.decode()
    assert "secret-workers" in page and "/shared-groups/delete/" not in page
    refused = client.post("/shared-groups/delete/", {"group": "secret-workers", "filter": "jobs/#"})
    assert refused.status_code == 403
    assert SharedGroupQueue.objects.filter(id=theirs.id).exists()


def test_the_quota_page_names_every_quota_key_the_group_ones_included(client):
    assert set(QUOTA_KEYS) <= set(LIMITS), set(QUOTA_KEYS) - set(LIMITS)
    acme, owner, _ = account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    group_row(acme, "workers", "jobs/#")
    expired = group_row(acme, "old", "old/#")
    SharedGroupQueue.objects.filter(id=expired.id).update(expires_at=timezone.now())
    client.force_login(owner)
    html = client.get("/quota/").content.decode()
    for label in (
        "Shared subscription groups",
        "Messages a shared group keeps",
        "Payload bytes a shared group keeps",
        "Shared group retention",
    ):
        assert label in html, label
    assert "100.0 MiB" in html and "1 day (86,400 s)" in html
    row = html[html.index('data-quota="max_shared_groups"') :]
    row = row[: row.index("</tr>")]
    assert '<td class="limit">100 groups</td>' in row
    assert '<td class="used">1 groups</td>' in row  # the live group, not the one past its end
    row = html[html.index('data-quota="max_group_messages"') :]
    assert '<td class="used">per shared group</td>' in row[: row.index("</tr>")]

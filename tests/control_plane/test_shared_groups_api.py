"""Durable shared groups through the REST API (issue 45), on real Postgres: `GET
/api/v1/shared-groups` lists a tenant's groups with what they hold (depth and oldest message
counted from the queue rows under each group's holder id, members as the broker wrote them);
`DELETE /api/v1/shared-groups/{group}?filter=F` deletes a group with its messages, announces
`shared_group.deleted` (group and filter) to the brokers when it commits, and is audited; a
missing filter is a 400 naming it; another tenant's group is a 404, never listed or deleted."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import quote

import pytest
from django.utils import timezone

from data_plane.broker.groups import holder_id
from tenants.models import AuditEntry, Membership, MqttQueuedMessage, SharedGroupQueue
from tenants.shared_groups import selectors as shared_group_selectors
from tests.api.conftest import acme, attacker, client_for  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)  # NOTIFY reaches the listener on commit


def group_row(tenant, name, topic_filter, *, members=0, expires_in=None, held=()):
    """A group row as the broker writes it, and its held messages (created_at each) as queue
    rows under its holder id."""
    now = timezone.now()
    group = SharedGroupQueue.objects.create(
        tenant=tenant,
        name=name,
        topic_filter=topic_filter,
        holder_id=holder_id(name, topic_filter),  # as the broker names it
        members=members,
        expires_at=None if expires_in is None else now + expires_in,
    )
    for seq, created_at in enumerate(held, start=1):
        MqttQueuedMessage.objects.create(
            tenant=tenant,
            client_id=group.holder_id,
            seq=seq,
            topic="jobs/x",
            payload=b"work",
            qos=1,
            created_at=created_at,
        )
    return group


def _path(name: str, topic_filter: str | None) -> str:
    path = f"/api/v1/shared-groups/{quote(name, safe='')}"
    return path if topic_filter is None else f"{path}?filter={quote(topic_filter, safe='')}"


def test_the_list_shows_each_group_with_its_depth_oldest_message_and_members(acme):  # noqa: F811
    tenant, api = acme
    now = timezone.now()
    oldest = now - timedelta(minutes=30)
    group_row(tenant, "workers", "jobs/#", members=0, expires_in=timedelta(hours=2),
           held=[oldest, now - timedelta(minutes=5), now])  # fmt: skip
    group_row(tenant, "alarms", "alarms/+", members=3)
    busy = group_row(tenant, "billing", "jobs/#", members=1, held=[now])
    # A held message past its expiry is not counted; a group past its end is not listed.
    MqttQueuedMessage.objects.create(
        tenant=tenant, client_id=busy.holder_id, seq=9, topic="jobs/y", qos=1,
        created_at=oldest - timedelta(hours=1), expires_at=now - timedelta(seconds=1),
    )  # fmt: skip
    group_row(tenant, "gone", "old/#", expires_in=timedelta(seconds=-1), held=[now])

    page = api.get("/api/v1/shared-groups").json()
    assert page["count"] == 3 and page["next"] is None
    rows = {(r["group"], r["filter"]): r for r in page["results"]}
    assert [r["group"] for r in page["results"]] == ["alarms", "billing", "workers"]
    workers = rows["workers", "jobs/#"]
    assert (workers["depth"], workers["members"]) == (3, 0)
    assert workers["oldest_at"] == oldest.isoformat().replace("+00:00", "Z")
    assert workers["expires_at"] and workers["created_at"]
    alarms = rows["alarms", "alarms/+"]
    assert (alarms["depth"], alarms["oldest_at"], alarms["members"]) == (0, None, 3)
    assert alarms["expires_at"] is None
    assert (rows["billing", "jobs/#"]["depth"], rows["billing", "jobs/#"]["members"]) == (1, 1)
    assert set(workers) == {
        "group", "filter", "depth", "oldest_at", "members", "expires_at", "created_at"
    }  # fmt: skip
    paged = api.get("/api/v1/shared-groups?limit=2").json()
    assert paged["count"] == 3 and len(paged["results"]) == 2 and paged["next"]


def test_the_list_is_one_query_however_many_groups(acme, django_assert_num_queries):  # noqa: F811
    tenant, _ = acme
    now = timezone.now()
    for index in range(5):
        group_row(tenant, f"g{index}", "t/#", held=[now] * index)
    with django_assert_num_queries(1):
        rows = list(shared_group_selectors.shared_groups_list(tenant=tenant))
    assert [(r.name, r.depth) for r in rows] == [(f"g{i}", i) for i in range(5)]


def test_delete_removes_the_group_and_its_messages_announces_and_audits(acme, listener):  # noqa: F811
    tenant, api = acme
    now = timezone.now()
    doomed = group_row(tenant, "workers", "jobs/#", held=[now, now])
    kept = group_row(tenant, "workers", "jobs/+", held=[now])  # same name, another filter
    listener(10, timeout=0.5)  # what signing up announced

    response = api.delete(_path("workers", "jobs/#"))
    assert response.status_code == 204, response.content
    assert not SharedGroupQueue.objects.filter(id=doomed.id).exists()
    assert not MqttQueuedMessage.objects.filter(client_id=doomed.holder_id).exists()
    assert SharedGroupQueue.objects.filter(id=kept.id).exists()
    assert MqttQueuedMessage.objects.filter(client_id=kept.holder_id).count() == 1
    [notice] = listener(1)
    assert notice == {
        "tenant": "acme",
        "kind": "shared_group.deleted",
        "group": "workers",
        "filter": "jobs/#",
    }
    entry = AuditEntry.objects.get(tenant_id=tenant.id, action="shared_group.deleted")
    assert (entry.target, entry.detail, entry.via) == (
        "$share/workers/jobs/#",
        {"messages": 2},
        "api",
    )
    assert [r["filter"] for r in api.get("/api/v1/shared-groups").json()["results"]] == ["jobs/+"]

    again = api.delete(_path("workers", "jobs/#"))
    assert again.status_code == 404
    assert again.json()["error"] == {
        "code": "not_found",
        "message": "No shared group 'workers' on the filter 'jobs/#'.",
    }
    assert listener(1, timeout=0.5) == []  # nothing deleted, nothing announced


def test_a_filter_is_required_and_must_be_a_topic_filter(acme):  # noqa: F811
    tenant, api = acme
    group_row(tenant, "workers", "jobs/#")
    for path, words in [
        (_path("workers", None), "filter: a topic filter is required"),
        (_path("workers", ""), "filter: a topic filter is required"),
        (_path("workers", "jobs/#/x"), "filter: '#' must be the last level"),
        (_path("workers", "$share/workers/jobs/#"), "filter: a shared subscription"),
    ]:
        refused = api.delete(path)
        assert refused.status_code == 400, path
        error = refused.json()["error"]
        assert error["code"] == "invalid" and error["message"].startswith(words), error
    assert SharedGroupQueue.objects.filter(tenant=tenant).count() == 1
    # A name no group can have is no such group, not a database error.
    assert api.delete(_path("a\x00b", "jobs/#")).status_code == 404
    assert api.delete(_path("x" * 300, "jobs/#")).status_code == 404


def test_another_tenant_can_neither_list_nor_delete_agroup_row(acme, attacker, listener):  # noqa: F811
    tenant, _ = acme
    _, evil = attacker
    group = group_row(tenant, "workers", "jobs/#", held=[timezone.now()])
    listener(10, timeout=0.5)
    assert evil.get("/api/v1/shared-groups").json()["count"] == 0
    response = evil.delete(_path("workers", "jobs/#"))
    assert response.status_code == 404
    assert "workers" in response.json()["error"]["message"]
    assert SharedGroupQueue.objects.filter(id=group.id).exists()
    assert MqttQueuedMessage.objects.filter(client_id=group.holder_id).count() == 1
    assert listener(1, timeout=0.5) == []
    assert client_for().get("/api/v1/shared-groups").status_code in (401, 403)


def test_a_viewer_lists_but_cannot_delete(acme):  # noqa: F811
    from django.contrib.auth import get_user_model

    from tenants.accounts import login_tokens

    tenant, _ = acme
    group_row(tenant, "workers", "jobs/#")
    viewer = get_user_model().objects.create_user("v@acme.io", "v@acme.io", "pass-w0rd-view")
    Membership.objects.create(user=viewer, tenant=tenant, role="viewer")
    api = client_for(login_tokens.login_token(user=viewer, tenant=tenant))
    assert api.get("/api/v1/shared-groups").json()["count"] == 1
    assert api.delete(_path("workers", "jobs/#")).status_code == 403
    assert SharedGroupQueue.objects.filter(tenant=tenant).count() == 1

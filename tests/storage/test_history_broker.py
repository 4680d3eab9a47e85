"""What a real broker archives (Postgres, paho publishing, the archive read back): a message if
and only if a history policy or an enabled rule of its tenant needs it, lifecycle rows only for
the `$events` sources rules read; and a rule enabled (or a policy added) while the broker runs
feeds the archive from then on, through the change notification, without a restart."""

import time
from datetime import UTC, datetime, timedelta

import pytest

from common.archive.files import read_archive
from common.stores.object_store import open_object_store
from tenants.devices import services as device_services
from tenants.history.services import history_policy_create
from tenants.rules import services as rule_services
from tenants.tenant import services as tenant_services
from tests.broker.clients import Paho
from tests.tenancy.test_broker_tenancy import start_pg_broker

pytestmark = pytest.mark.django_db(transaction=True)
TOPICS = ("sensors/1", "alarms/x", "other/y")


def _rows(store, tenant: str) -> list[tuple[str, str | None]]:
    now = datetime.now(UTC)
    rows = read_archive(store, now - timedelta(hours=2), now + timedelta(hours=1), tenant)
    return sorted((r["event"], r["topic"]) for r in rows.to_pylist())


def _device(tenant) -> str:
    _, secret = device_services.device_create(tenant=tenant, name="d", client_id_policy="any")
    return secret


def test_only_what_a_policy_or_an_enabled_rule_needs_is_archived(tmp_path, monkeypatch):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    kept = tenant_services.tenant_create("kept")
    history_policy_create(tenant=kept, topic_filter="sensors/#", days=1)
    ruled = tenant_services.tenant_create("ruled")
    rule_services.rule_create(tenant=ruled, name="alarm", sql='SELECT * FROM "alarms/+"')
    rule_services.rule_create(
        tenant=ruled, name="hello", sql='SELECT clientid FROM "$events/client_connected"'
    )
    rule_services.rule_create(
        tenant=ruled, name="off", sql='SELECT * FROM "other/#"', enabled=False
    )
    bare = tenant_services.tenant_create("bare")  # the free plan keeps nothing by default
    paid = tenant_services.tenant_create("paid", plan="pro")  # the paid plan: every topic, a week
    secrets = {t.slug: _device(t) for t in (kept, ruled, bare, paid)}
    process, port = start_pg_broker("--archive-interval", "0.2")
    try:
        for slug, secret in secrets.items():
            client = Paho(port, f"{slug}/d", secret, f"{slug}-1")
            for topic in TOPICS:
                client.publish(topic, f"{slug} on {topic}", 1)
            client.close()
    finally:
        process.terminate()  # a graceful stop uploads what the archive holds
        assert process.wait(timeout=20) == 0
    store = open_object_store()
    publish = "message.publish"
    assert _rows(store, "kept") == [(publish, "sensors/1")]
    assert _rows(store, "ruled") == [("client.connected", None), (publish, "alarms/x")]
    assert _rows(store, "bare") == []
    assert _rows(store, "paid") == sorted((publish, t) for t in TOPICS)


def _archived(store, tenant: str) -> set[str]:
    return {topic for event, topic in _rows(store, tenant) if event == "message.publish"}


def _publish_until_archived(client, store, tenant: str, prefix: str, timeout: float = 15) -> int:
    """Publish `{prefix}/0`, `{prefix}/1`, … until one comes back from the archive; returns how
    many were published."""
    deadline = time.monotonic() + timeout
    sent = 0
    while not any(t.startswith(prefix + "/") for t in _archived(store, tenant)):
        assert time.monotonic() < deadline, f"nothing on {prefix}/ archived"
        client.publish(f"{prefix}/{sent}", b"x", 1)
        sent += 1
        time.sleep(0.1)
    return sent


def test_a_rule_enabled_later_feeds_the_archive_from_then_on_without_a_restart(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    tenant = tenant_services.tenant_create("late")
    secret = _device(tenant)
    store = open_object_store()
    process, port = start_pg_broker("--archive-interval", "0.2")
    try:
        client = Paho(port, "late/d", secret, "late-1")
        client.publish("a/before", b"x", 1)
        rule = rule_services.rule_create(tenant=tenant, name="feed", sql='SELECT * FROM "a/+"')
        sent = _publish_until_archived(client, store, "late", "a")
        for i in range(sent, sent + 3):  # from then on, every one
            client.publish(f"a/{i}", b"x", 1)
        rule_services.rule_update(rule, enabled=False)  # and no longer once it is disabled
        history_policy_create(tenant=tenant, topic_filter="b/#", days=1)  # a policy, the same way
        # Notifications arrive in order: once b/ is archived, the rule's end was applied too.
        _publish_until_archived(client, store, "late", "b")
        client.publish("a/after", b"x", 1)
        client.close()
    finally:
        process.terminate()
        assert process.wait(timeout=20) == 0
    archived = _archived(store, "late")
    a = sorted(int(t[2:]) for t in archived if t.startswith("a/") and t[2:].isdigit())
    assert a and a == list(range(a[0], sent + 3)), a  # none missing after the first
    assert a[0] <= 5, a  # published 0.1 s apart: the broker followed within half a second
    assert "a/before" not in archived and "a/after" not in archived

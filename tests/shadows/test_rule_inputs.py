"""Shadow changes as rule inputs: the broker archives each accepted update, delta and deletion
as `shadow.updated` / `shadow.delta` / `shadow.deleted` rows (payload: the document devices are
sent), which rule SQL reads as `FROM "$events/shadow/updated"` (and `…/delta`, `…/deleted`):
evaluated here with the rule jobs' own compiler on the rows the broker wrote, and through the
API's dry run."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from common.archive.files import read_archive
from common.archive.schema import EVENT_SHADOW_DELTA, EVENT_SHADOW_UPDATED
from common.rules.compiler import compile_rule
from common.stores.object_store import open_object_store
from tests.shadows.conftest import Watcher, api_client
from tests.shadows.test_mqtt import send

pytestmark = pytest.mark.django_db(transaction=True)


def shadow_rows(broker, tenant: str, count: int, timeout: float = 8.0) -> list[dict]:
    store = open_object_store(broker.objects)
    now = datetime.now(UTC)
    deadline = time.monotonic() + timeout
    while True:
        rows = [
            r
            for r in read_archive(
                store, now - timedelta(hours=1), now + timedelta(hours=1), tenant
            ).to_pylist()
            if r["event"].startswith("shadow.")
        ]
        if len(rows) >= count or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def test_shadow_changes_are_rule_inputs(tls_broker, fleet):
    from tenants.history.services import history_policy_create

    fleet.device("lamp")
    # The archive keeps what a policy or an enabled rule asks for (issue 31): the shadow events.
    history_policy_create(tenant=fleet.tenant, topic_filter="$events/shadow/#", days=1)
    time.sleep(0.5)  # the broker hears the change (history.changed)
    lamp = Watcher(tls_broker.port, fleet, "lamp")
    try:
        send(lamp, "$aws/things/lamp/shadow/update", {"state": {"desired": {"color": "red"}}})
        lamp.get(3)
    finally:
        lamp.close()
    rows = shadow_rows(tls_broker, fleet.slug, 2)
    by_event = {r["event"]: r for r in rows}
    assert set(by_event) == {EVENT_SHADOW_UPDATED, EVENT_SHADOW_DELTA}
    updated = by_event[EVENT_SHADOW_UPDATED]
    assert updated["topic"] == "$aws/things/lamp/shadow/update/documents"
    assert (updated["client_id"], updated["username"]) == ("lamp", f"{fleet.slug}/lamp")

    rule = compile_rule(
        "SELECT payload.current.state.desired.color AS color, payload.current.version AS v,"
        ' clientid FROM "$events/shadow/updated"'
    )
    result = rule.apply(updated)
    assert result.outputs == [{"color": "red", "v": 1, "clientid": "lamp"}]
    assert not rule.apply(by_event[EVENT_SHADOW_DELTA]).outputs  # another source's row
    deltas = compile_rule('SELECT payload.state AS wanted FROM "$events/shadow/delta"')
    assert deltas.apply(by_event[EVENT_SHADOW_DELTA]).outputs == [{"wanted": {"color": "red"}}]

    owner = api_client(fleet.tenant)
    tried = owner.post(
        "/api/v1/rules/test",
        {
            "sql": 'SELECT payload.state.color AS c FROM "$events/shadow/delta"',
            "context": {"event": "$events/shadow/delta", "payload": {"state": {"color": "blue"}}},
        },
        format="json",
    )
    assert tried.json() == {"match": True, "outputs": [{"c": "blue"}]}
    saved = owner.post(
        "/api/v1/rules",
        {
            "name": "shadow-audit",
            "sql": 'SELECT clientid, topic FROM "$events/shadow/updated", "$events/shadow/deleted"',
            "actions": [{"type": "dataset", "name": "shadow-changes"}],
        },
        format="json",
    )
    assert saved.status_code == 201, saved.content

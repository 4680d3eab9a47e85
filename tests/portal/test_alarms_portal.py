"""The Alarms pages through Django's test client (issue 46): the states active first with
filters, an Acknowledge button that acknowledges once (recording who), a key's history; the
definitions listed, created (errors shown on their fields), edited, switched on and off and
deleted. Another tenant's alarm, by id or name, is a 404 and stays as it was; a viewer reads
but has no form. The quota page names the alarm quotas."""

import pytest
from django.contrib.auth import get_user_model

from tenants.accounts import services as account_services
from tenants.models import AlarmDefinition, AlarmTransition, Membership
from tests.control_plane.test_alarms_api import state_row, transition_row

pytestmark = pytest.mark.django_db
PASSWORD = "a long passphrase"


def _definition(tenant, name="hot", **fields):
    return AlarmDefinition.objects.create(
        tenant=tenant, name=name, source="t/#", raise_condition="payload.t > 1", **fields
    )


def _row(html, marker):
    row = html[html.index(marker) :]
    return row[: row.index("</tr>")]


def test_the_alarms_page_lists_active_first_filters_and_acknowledges(client):
    acme, owner, _ = account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    hot = _definition(acme, severity="critical")
    quiet = _definition(acme, "quiet", severity="info")
    state_row(acme, hot, "d1", "normal", ago=1)
    active = state_row(acme, hot, "d2", "active", ago=9, value=97, cause="condition")
    state_row(acme, quiet, "d3", "pending", ago=2)
    transition_row(active, "raise", "normal", "active", ago=9, message_id="seg-7:3")
    client.force_login(owner)

    html = client.get("/alarms/").content.decode()
    assert 'href="/alarms/" aria-current="page"' in html
    order = [html.index(f'data-key="{k}"') for k in ("d2", "d3", "d1")]
    assert order == sorted(order)  # active, pending, normal
    row = _row(html, 'data-key="d2"')
    assert f'action="/alarms/{active.id}/acknowledge/"' in row and "csrfmiddlewaretoken" in row
    assert f'href="/alarms/{active.id}/history/"' in row
    assert "acknowledge/" not in _row(html, 'data-key="d1"')  # only an active one
    filtered = client.get("/alarms/?severity=info").content.decode()
    assert 'data-key="d3"' in filtered and 'data-key="d2"' not in filtered
    filtered = client.get("/alarms/?device=d1&state=normal").content.decode()
    assert 'data-key="d1"' in filtered and 'data-key="d2"' not in filtered

    page = client.post(f"/alarms/{active.id}/acknowledge/", {"note": "on it"}, follow=True)
    assert "Acknowledged the alarm hot for d2." in page.content.decode()
    [ack] = AlarmTransition.objects.filter(event="acknowledge")
    assert (ack.by, ack.note, ack.after) == ("me@acme.io", "on it", "acknowledged")
    again = client.post(f"/alarms/{active.id}/acknowledge/", follow=True).content.decode()
    assert "is acknowledged, not active" in again
    assert AlarmTransition.objects.filter(event="acknowledge").count() == 1

    history = client.get(f"/alarms/{active.id}/history/").content.decode()
    assert history.index('data-event="acknowledge"') < history.index('data-event="raise"')
    assert "seg-7:3" in history and "me@acme.io" in history and "on it" in history


def test_definitions_are_created_with_errors_by_field_edited_toggled_and_deleted(client):
    acme, owner, _ = account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    client.force_login(owner)
    assert 'href="/alarms/definitions/new/"' in client.get("/alarms/definitions/").content.decode()
    form = {"name": "hot", "source": "sensors/#/x", "raise_condition": "payload.t >",
            "severity": "major", "notifications": "[]"}  # fmt: skip
    page = client.post("/alarms/definitions/new/", form).content.decode()
    assert "must be the last level" in page and not AlarmDefinition.objects.exists()
    form["source"] = "sensors/+/temp"
    page = client.post("/alarms/definitions/new/", form).content.decode()
    assert "not an expression" in page and not AlarmDefinition.objects.exists()
    form["raise_condition"] = "payload.t > 90"
    form["raise_for_seconds"] = "60"
    saved = client.post("/alarms/definitions/new/", form, follow=True)
    assert "Alarm hot saved." in saved.content.decode()
    hot = AlarmDefinition.objects.get(tenant=acme, name="hot")
    assert (hot.enabled, hot.raise_for_seconds, hot.key, hot.seen_days) == (
        False,
        60,
        "clientid",
        7,
    )

    edited = client.post("/alarms/definitions/hot/", {**form, "raise_for_seconds": "120"}, follow=True)  # fmt: skip
    assert "Alarm hot saved." in edited.content.decode()
    hot.refresh_from_db()
    assert (hot.raise_for_seconds, hot.version) == (120, 2)
    client.post("/alarms/definitions/hot/toggle/")
    hot.refresh_from_db()
    assert hot.enabled is True
    listed = client.get("/alarms/definitions/").content.decode()
    assert '<td class="enabled">yes</td>' in _row(listed, 'data-alarm="hot"')
    client.post("/alarms/definitions/hot/delete/")
    assert not AlarmDefinition.objects.exists()


def test_another_tenants_alarms_are_404_and_a_viewer_only_reads(client):
    acme, _, _ = account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    hot = _definition(acme, "secret-hot")
    active = state_row(acme, hot, "d1", "active")
    _, attacker, _ = account_services.signup(tenant="evil", email="x@evil.io", password=PASSWORD)
    client.force_login(attacker)
    assert b"secret-hot" not in client.get("/alarms/").content
    assert b"secret-hot" not in client.get("/alarms/definitions/").content
    for method, path in [
        ("post", f"/alarms/{active.id}/acknowledge/"),
        ("get", f"/alarms/{active.id}/history/"),
        ("get", "/alarms/definitions/secret-hot/"),
        ("post", "/alarms/definitions/secret-hot/"),
        ("post", "/alarms/definitions/secret-hot/toggle/"),
        ("post", "/alarms/definitions/secret-hot/delete/"),
    ]:
        assert getattr(client, method)(path).status_code == 404, (method, path)
    hot.refresh_from_db()
    active.refresh_from_db()
    assert (hot.enabled, active.status) == (False, "active")

    viewer = get_user_model().objects.create_user("v@acme.io", "v@acme.io", PASSWORD)
    Membership.objects.create(user=viewer, tenant=acme, role="viewer")
    client.force_login(viewer)
    page = client.get("/alarms/").content.decode()
    assert "secret-hot" in page and "acknowledge/" not in page
    assert "/delete/" not in client.get("/alarms/definitions/").content.decode()
    assert client.post(f"/alarms/{active.id}/acknowledge/").status_code == 403
    assert client.post("/alarms/definitions/secret-hot/delete/").status_code == 403
    assert AlarmDefinition.objects.filter(id=hot.id).exists()


def test_the_quota_page_names_the_alarm_quotas(client):
    acme, owner, _ = account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    _definition(acme)
    client.force_login(owner)
    html = client.get("/quota/").content.decode()
    assert "Alarm definitions" in html and "Alarm states (alarm, key)" in html
    assert '<td class="used">1 alarms</td>' in _row(html, 'data-quota="max_alarms"')
    assert '<td class="limit">20 alarms</td>' in _row(html, 'data-quota="max_alarms"')


def test_an_alarm_is_tried_on_history_from_its_page(client, tmp_path, monkeypatch):
    """The definition page's "Try it on history": the range asked, the preview's raises, keys
    and first transitions over the tenant's archive — only its own messages."""
    from datetime import UTC, datetime, timedelta

    from common.stores.object_store import LocalObjectStore
    from tests.spark.conftest import message, write_live

    monkeypatch.setenv("OBJECT_STORE_URL", f"file://{tmp_path}/objects")
    store = LocalObjectStore(tmp_path / "objects")
    start = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(hours=1)
    base = int(start.timestamp() * 1000) + 60_000
    rows = [message("acme", "t/pump", {"t": 5 if s < 30 else 0}, base + s * 1000,
                    client_id="pump") for s in range(0, 60, 5)]  # fmt: skip
    rows.append(message("evil", "t/pump", {"t": 9}, base, client_id="evil-pump"))
    write_live(store, rows)
    acme, owner, _ = account_services.signup(tenant="acme", email="me@acme.io", password=PASSWORD)
    _definition(acme, raise_for_seconds=10)
    client.force_login(owner)
    page = client.get("/alarms/definitions/hot/").content.decode()
    assert "Try it on history" in page and "First transitions" not in page  # not asked yet
    asked = {"from": start.strftime("%Y-%m-%dT%H:%M"), "to": (start + timedelta(hours=1))
             .strftime("%Y-%m-%dT%H:%M")}  # fmt: skip
    page = client.get("/alarms/definitions/hot/", asked).content.decode()
    assert "<strong>1</strong> raise for <strong>1</strong> key over 12 of your 12 messages" in page
    assert "<code>pump</code>" in page and "evil-pump" not in page
    assert "normal → pending (pending)" in page and "pending → active (raise)" in page
    bad = client.get("/alarms/definitions/hot/", {"from": "yesterday", "to": "x"}).content.decode()
    assert "is not a time" in bad

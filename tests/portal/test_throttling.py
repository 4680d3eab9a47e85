"""Throttling and drops, explained (issue 28, point 3): how often each limit slowed or refused
something in the last hour and the last 24 hours, what was dropped and why, and why a device
last disconnected, in words. Usage rows as the broker's metering writes them (per minute:
`throttled` by limit, `dropped` by cause), real Postgres, the portal through Django's client."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from html import unescape

import pytest
from django.utils import timezone

from common.mqtt.reason_codes import ReasonCode
from tenants.accounts import services as account_services
from tenants.devices import disconnect_reasons
from tenants.devices import services as device_services
from tenants.models import Device, Usage
from tenants.tenant import services as tenant_services
from tenants.usage.throttling import limit_activity

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 11, 27, 14, 30, 15, tzinfo=UTC)


def minute(ago: timedelta, now: datetime = NOW) -> datetime:
    return (now - ago).replace(second=0, microsecond=0)


@pytest.fixture
def owner(client):
    tenant, user, _ = account_services.signup(
        tenant="acme", email="me@acme.io", password="a long pass"
    )
    client.force_login(user)
    return tenant


def usage(tenant, at: datetime, *, dropped=None, throttled=None) -> Usage:
    return Usage.objects.create(
        tenant=tenant, minute=at, dropped=dropped or {}, throttled=throttled or {}
    )


def words(html: str) -> str:
    """Markup as a person reads it: tags out, entities decoded, spaces collapsed."""
    spaced = re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))
    return re.sub(r" ([:,.])", r"\1", spaced)


def text(response) -> str:
    return words(response.content.decode())


# -- the selector -------------------------------------------------------------------------------


def test_slowdowns_refusals_and_drops_per_window_scoped_to_the_tenant(owner):
    other, _, _ = account_services.signup(
        tenant="other", email="o@other.io", password="a long pass"
    )
    usage(
        owner,
        minute(timedelta(minutes=3)),
        throttled={"publish_rate": 1000},
        dropped={"quota_publish_rate": 10, "queue_full": 4},
    )
    usage(owner, minute(timedelta(minutes=28)), throttled={"publish_rate": 234})
    usage(
        owner,
        minute(timedelta(hours=5)),
        throttled={"outbound_rate": 7, "publish_rate": 1},
        dropped={"quota_connections": 3, "quota_message_size": 2, "queue_full": 6},
    )
    usage(owner, minute(timedelta(hours=25)), throttled={"publish_rate": 99_999})  # too old
    usage(owner, minute(timedelta(minutes=10)))  # a minute with traffic but nothing to say
    # Another tenant's storm in the same minutes: never counted for acme.
    usage(other, minute(timedelta(minutes=3)), throttled={"publish_rate": 5}, dropped={"x": 1})

    windows = limit_activity(tenant=owner, now=NOW)

    hour = windows["last_hour"]
    assert hour.since == NOW - timedelta(hours=1) and hour.until == NOW
    [rate] = hour.limits
    assert (rate.limit, rate.slowed, rate.refused) == ("publish_rate", 1234, 10)
    assert rate.last_slowed_at == rate.last_refused_at == minute(timedelta(minutes=3))
    assert hour.dropped == {"quota_publish_rate": 10, "queue_full": 4}
    assert hour.messages_dropped == 14

    day = windows["last_24h"]
    by_limit = {a.limit: (a.slowed, a.refused, a.last_at) for a in day.limits}
    assert by_limit == {
        "publish_rate": (1235, 10, minute(timedelta(minutes=3))),
        "outbound_rate": (7, 0, minute(timedelta(hours=5))),
        "connections": (0, 3, minute(timedelta(hours=5))),
        "message_size": (0, 2, minute(timedelta(hours=5))),
    }
    assert [a.limit for a in day.limits][0] == "publish_rate"  # busiest first
    assert day.dropped == {
        "queue_full": 10,
        "quota_publish_rate": 10,
        "quota_connections": 3,
        "quota_message_size": 2,
    }
    # Refused connections are not messages; slowdowns are not drops at all.
    assert day.messages_dropped == 22
    assert day.slowed == 1242


def test_nothing_recorded_is_an_empty_window(owner):
    # A row some writer got wrong counts as nothing rather than breaking the pages.
    usage(owner, minute(timedelta(minutes=1)), dropped=["queue_full"], throttled={"x": "many"})
    windows = limit_activity(tenant=owner, now=NOW)
    assert [w.limits for w in windows.values()] == [[], []]
    assert [w.messages_dropped for w in windows.values()] == [0, 0]


# -- the quota page ------------------------------------------------------------------------------


def test_quota_page_explains_each_limit_that_slowed_or_refused(client, owner):
    now = timezone.now()
    tenant_services.tenant_set_quota(owner, {"max_publish_rate": 100})
    usage(
        owner,
        minute(timedelta(minutes=2), now),
        throttled={"publish_rate": 1234},
        dropped={"quota_publish_rate": 12},
    )
    usage(owner, minute(timedelta(hours=3), now), throttled={"publish_rate": 66})
    usage(owner, minute(timedelta(hours=6), now), dropped={"quota_subscriptions": 1})

    page = text(client.get("/quota/"))

    last = timezone.localtime(minute(timedelta(minutes=2), now)).strftime("%H:%M")
    assert "Throttling" in page
    assert "Publish rate (100 messages/s)" in page
    assert f"Slowed 1,234 times / refused 12 times in the last hour (last at {last} UTC)" in page
    assert f"Slowed 1,300 times / refused 12 times in the last 24 hours (last at {last}" in page
    assert "the broker stopped reading them until the rate allowed more" in page
    assert "max_device_publish_rate" in page and "What to do:" in page
    assert "Subscriptions per client (100 subscriptions)" in page
    assert "Nothing in the last hour" in page
    assert "Refused once in the last 24 hours" in page
    assert "Use wildcards" in page


def test_quota_page_says_when_no_limit_did_anything(client, owner):
    usage(owner, minute(timedelta(minutes=2), timezone.now()), dropped={"queue_full": 3})
    page = text(client.get("/quota/"))
    assert "No limit slowed or refused anything in the last 24 hours." in page


def test_quota_table_has_the_per_device_publish_rate(client, owner):
    response = client.get("/quota/")
    row = re.search(
        r'<tr data-quota="max_device_publish_rate">.*?</tr>', response.content.decode(), re.S
    )
    assert row, "no row for max_device_publish_rate"
    shown = words(row.group(0))
    assert "Publish rate per device" in shown
    assert "no per-device limit: devices share the tenant's rate fairly" in shown
    assert "per device" in shown

    tenant_services.tenant_set_quota(owner, {"max_device_publish_rate": 5})
    row = re.search(
        r'<tr data-quota="max_device_publish_rate">.*?</tr>',
        client.get("/quota/").content.decode(),
        re.S,
    )
    assert "5 messages/s" in row.group(0)


def test_the_page_title_is_only_a_title(client, owner):
    body = client.get("/quota/").content.decode()
    assert "<title>Plan · MQTT platform</title>" in body


# -- the dashboard -------------------------------------------------------------------------------


def test_dashboard_says_what_was_dropped_over_which_period_and_slowdowns_apart(client, owner):
    now = timezone.now()
    usage(
        owner,
        minute(timedelta(minutes=5), now),
        dropped={"queue_full": 10, "quota_message_size": 2, "quota_connections": 4},
        throttled={"publish_rate": 59_144},
    )
    usage(owner, minute(timedelta(hours=30), now), dropped={"queue_full": 500})  # too old

    page = text(client.get("/"))

    assert "Messages dropped in the last 24 hours: 12 — queue full 10, message too large 2" in page
    assert "Refused in the last 24 hours (not messages): connections refused 4" in page
    assert "Slowed by a limit in the last 24 hours, not dropped:" in page
    assert "Publish rate (100 messages/s): 59,144 times" in page
    # The live counter says what it counts and since when.
    assert "Dropped since the broker started" in page
    assert not re.search(r"\bDropped\s+–", page)  # no bare "Dropped" counter left


def test_dashboard_with_nothing_dropped(client, owner):
    page = text(client.get("/"))
    assert "Messages dropped in the last 24 hours: 0" in page
    assert "No limit slowed your devices in the last 24 hours." in page


# -- the device page -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "recorded, said, small",
    [
        (
            "0x96",
            "Message rate too high: the device published faster than the plan allows for too long",
            "0x96",
        ),
        (
            "keepalive_timeout",
            "Keep-alive timeout: the broker heard nothing",
            "0x8D · keepalive_timeout",
        ),
        ("takenover", "Session taken over: another connection logged in", "0x8E · takenover"),
        ("kicked", "Administrative action: the platform ended the connection", "0x98 · kicked"),
        ("tcp_closed", "Connection closed: the device or the network closed", "tcp_closed"),
        ("normal", "Normal disconnection: the device sent DISCONNECT", "0x00 · normal"),
    ],
)
def test_device_page_names_the_last_disconnect_reason_in_words(
    client, owner, recorded, said, small
):
    device, _ = device_services.device_create(tenant=owner, name="sensor-1")
    Device.objects.filter(id=device.id).update(
        last_disconnect_reason=recorded, last_disconnected_at=timezone.now()
    )
    body = client.get("/devices/sensor-1/").content.decode()
    cell = re.search(r'<dd id="last-disconnect">(.*?)</dd>', body, re.S).group(1)
    assert said in words(cell)
    assert re.search(r'<small class="muted reason-code">' + re.escape(small) + " · at ", cell)


def test_every_token_and_every_mqtt5_reason_code_has_words():
    for token in (
        "normal",
        "tcp_closed",
        "sock_error",
        "keepalive_timeout",
        "takenover",
        "kicked",
        "not_authorized",
        "protocol_error",
        "server_shutting_down",
        "unknown",
    ):
        described = disconnect_reasons.describe(token)
        assert described.title and described.detail and described.title != token
    for code in ReasonCode:
        described = disconnect_reasons.describe(f"0x{int(code):02x}")
        assert described.code == code and described.title != f"0x{int(code):02x}", code
        assert not described.title.startswith("Reason code"), code
    odd = disconnect_reasons.describe("0xfe")
    assert odd.title == "Reason code 0xFE" and odd.code_text == "0xFE"
    assert disconnect_reasons.describe("") is None
    assert disconnect_reasons.describe("something_new").title == "something_new"


def test_api_device_carries_the_reason_in_words(owner):
    from rest_framework.test import APIClient

    _, token = account_services.api_token_create(
        user=owner.memberships.first().user, tenant=owner, name="t"
    )
    device, _ = device_services.device_create(tenant=owner, name="sensor-1")
    Device.objects.filter(id=device.id).update(last_disconnect_reason="0x96")
    api = APIClient()
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = api.get("/api/v1/devices/sensor-1").json()
    assert body["last_disconnect_reason"] == "0x96"
    assert body["last_disconnect_description"].startswith("Message rate too high: ")


def test_a_disconnect_for_a_limit_links_to_what_the_limits_did(client, owner):
    device, _ = device_services.device_create(tenant=owner, name="sensor-1")
    for recorded, linked in (("0x96", True), ("0x97", True), ("keepalive_timeout", False)):
        Device.objects.filter(id=device.id).update(last_disconnect_reason=recorded)
        body = client.get("/devices/sensor-1/").content.decode()
        cell = re.search(r'<dd id="last-disconnect">(.*?)</dd>', body, re.S).group(1)
        assert ('href="/quota/#throttling"' in cell) is linked, recorded


def test_dashboards_two_dropped_figures_each_say_what_they_count_and_why_they_differ(client, owner):
    """Issue 41: "Dropped since the broker started" (the broker's live counter) beside
    "Messages dropped in the last 24 hours" (the usage minutes) showed 209 and 204 with nothing
    to tell a person why. Each now says its window and what it counts, and how they differ."""
    usage(owner, minute(timedelta(minutes=5), timezone.now()), dropped={"queue_full": 3})
    page = text(client.get("/"))

    assert "Messages dropped in the last 24 hours: 3 — queue full 3" in page
    assert (
        "Dropped since the broker started – live, over the broker's whole uptime: copies not "
        "delivered and PUBLISHes refused without ending the connection, those the ACL refused "
        "included" in page
    )
    assert (
        "Why this differs from “Dropped since the broker started” (Live): that counter runs to "
        "this second and over the broker's whole uptime, not 24 hours; it counts PUBLISHes refused "
        "by the ACL (or for an invalid topic), which are not here, and leaves out those refused "
        "by ending the connection (a message too large), which are here." in page
    )

"""Usage per device group (issue 33, point 1): `GET /api/v1/usage?by=group` and the portal's
per-group table sum the devices' metered usage per group as the groups are now — a device in two
groups counts in each, devices in no group (and usage that is no device's of the tenant now: a
deleted device, the browser client) under "(no group)". From the attacker's side: a tenant with a
device of the same name in its own group never gets another tenant's usage, nor sees its groups."""

from __future__ import annotations

from datetime import date

import pytest

from tenants.devices import services as device_services
from tenants.jobs import services as job_services
from tenants.models import DeviceUsage, Tenant
from tests.api.conftest import acme, attacker  # noqa: F401 (fixtures)

DAY_1, DAY_2 = date(2026, 9, 1), date(2026, 9, 2)
RANGE = "from=2026-09-01&to=2026-09-03&granularity=day"


def usage(tenant: Tenant, device: str, day: date, units: int, minutes: int = 0, **more) -> None:
    DeviceUsage.objects.create(
        tenant=tenant,
        device=device,
        day=day,
        message_units=units,
        connection_minutes=minutes,
        **more,
    )


NONE = {"rules_triggered": 0, "actions_executed": 0, "shadow_operations": 0}
# d2's rule evaluations, actions and shadow operations on day 1 (it counts in north and south).
D2 = {"rules_triggered": 3, "actions_executed": 2, "shadow_operations": 5}


@pytest.fixture
def grouped(acme, attacker):  # noqa: F811
    """acme: north {d1, d2}, south {d2, d3}, empty {}; d4 in none. evil: its own d1 and d4,
    in its groups north and spy, with usage of its own."""
    tenant, _ = acme
    evil, _ = attacker
    for name in ("d1", "d2", "d3", "d4"):
        device_services.device_create(tenant=tenant, name=name)
    gone, _ = device_services.device_create(tenant=tenant, name="gone")
    job_services.group_create(tenant=tenant, name="north", devices=["d1", "d2", "gone"])
    job_services.group_create(tenant=tenant, name="south", devices=["d2", "d3"])
    job_services.group_create(tenant=tenant, name="empty")
    usage(tenant, "d1", DAY_1, 10, 5)
    usage(tenant, "d2", DAY_1, 20, 1, **D2)
    usage(tenant, "d2", DAY_2, 1)
    usage(tenant, "d3", DAY_2, 300)
    usage(tenant, "d4", DAY_1, 7)
    usage(tenant, "$console", DAY_1, 2)
    usage(tenant, "gone", DAY_2, 4)
    usage(tenant, "d1", date(2026, 10, 1), 5_000)  # after the range and the month
    device_services.device_delete(gone)  # its usage stays; it is in no group now
    for name in ("d1", "d4"):
        device_services.device_create(tenant=evil, name=name)
    job_services.group_create(tenant=evil, name="north", devices=["d1"])
    job_services.group_create(tenant=evil, name="spy", devices=["d4"])
    usage(evil, "d1", DAY_1, 999, 9, rules_triggered=77, actions_executed=77)
    return acme, attacker


def test_usage_by_group_counts_each_group_and_no_group(grouped):
    (_, api), _ = grouped
    response = api.get(f"/api/v1/usage?{RANGE}&by=group")
    assert response.status_code == 200, response.content
    body = response.json()
    assert body["groups"] == [
        # d2 is in north and south: its 21 units and 1 minute count in both.
        {
            "group": "south",
            "members": 2,
            "devices": 2,
            "messages": 321,
            "connection_minutes": 1,
            **D2,
        },
        {
            "group": "north",
            "members": 2,
            "devices": 2,
            "messages": 31,
            "connection_minutes": 6,
            **D2,
        },
        {
            "group": "empty",
            "members": 0,
            "devices": 0,
            "messages": 0,
            "connection_minutes": 0,
            **NONE,
        },
        # d4, the console and the deleted device: no group of acme's (evil's spy holds its own d4)
        {
            "group": "(no group)",
            "members": None,
            "devices": 3,
            "messages": 13,
            "connection_minutes": 0,
            **NONE,
        },
    ]
    assert [
        (r["day"], r["group"], r["messages"], r["connection_minutes"], r["devices"])
        for r in body["rows"]
    ] == [
        ("2026-09-01", "north", 30, 6, 2),
        ("2026-09-01", "south", 20, 1, 1),
        ("2026-09-01", "(no group)", 9, 0, 2),
        ("2026-09-02", "north", 1, 0, 1),
        ("2026-09-02", "south", 301, 0, 2),
        ("2026-09-02", "(no group)", 4, 0, 1),
    ]
    assert [
        (r["group"], r["rules_triggered"], r["actions_executed"], r["shadow_operations"])
        for r in body["rows"]
        if r["day"] == "2026-09-01"
    ] == [("north", 3, 2, 5), ("south", 3, 2, 5), ("(no group)", 0, 0, 0)]
    assert len(body["series"]) == 2  # the tenant's own series is still there


def test_by_group_from_the_attackers_side(grouped):
    _, (_, evil_api) = grouped
    body = evil_api.get(f"/api/v1/usage?{RANGE}&by=group").json()
    # Its own north (its d1: 999), its spy (its d4: none of acme's d4's 7 units); nothing of acme's.
    assert body["groups"] == [
        {
            "group": "north",
            "members": 1,
            "devices": 1,
            "messages": 999,
            "connection_minutes": 9,
            "rules_triggered": 77,
            "actions_executed": 77,
            "shadow_operations": 0,
        },
        {
            "group": "spy",
            "members": 1,
            "devices": 0,
            "messages": 0,
            "connection_minutes": 0,
            **NONE,
        },
    ]
    assert [(r["group"], r["messages"]) for r in body["rows"]] == [("north", 999)]


@pytest.mark.parametrize(
    "query, field",
    [
        ("by=tenant", "by"),
        ("by=", "by"),
        ("from=2026-01-01&to=2026-09-01&by=group", "to"),  # more than 93 days
        ("from=2026-09-02&to=2026-09-01&by=group", "to"),
    ],
)
def test_by_names_a_bad_request(acme, query, field):  # noqa: F811
    _, api = acme
    if "from=" not in query:
        query = f"{RANGE}&{query}"
    response = api.get(f"/api/v1/usage?{query}")
    assert response.status_code == 400, response.content
    assert field in response.json()["error"]["fields"]


def test_portal_usage_page_has_a_per_group_table_of_the_tenants_own(grouped, client):
    client.login(username="owner@acme.io", password="pass-w0rd-acme")
    page = client.get("/usage/?period=2026-09").content.decode()
    assert 'id="per-group"' in page
    for group, cells in (
        (
            "south",
            "<td>south</td><td>2 / 2</td><td>321</td><td>1</td><td>3</td><td>2</td><td>5</td>",
        ),
        (
            "north",
            "<td>north</td><td>2 / 2</td><td>31</td><td>6</td><td>3</td><td>2</td><td>5</td>",
        ),
        ("empty", "<td>empty</td><td>0 / 0</td><td>0</td><td>0</td><td>0</td><td>0</td><td>0</td>"),
        (
            "(no group)",
            "<td>(no group)</td><td>3</td><td>13</td><td>0</td><td>0</td><td>0</td><td>0</td>",
        ),
    ):
        assert f'<tr data-group="{group}">{cells}</tr>' in page, group
    assert page.index('data-group="south"') < page.index('data-group="(no group)"')
    assert 'data-group="spy"' not in page and "999" not in page
    client.logout()

    client.login(username="owner@evil.io", password="pass-w0rd-evil")
    page = client.get("/usage/?period=2026-09").content.decode()
    assert (
        '<tr data-group="north"><td>north</td><td>1 / 1</td><td>999</td><td>9</td>'
        "<td>77</td><td>77</td><td>0</td></tr>"
    ) in page
    assert 'data-group="south"' not in page and "321" not in page


def test_portal_without_groups_says_how_to_make_one(acme, client):  # noqa: F811
    tenant, _ = acme
    usage(tenant, "d1", DAY_1, 10)
    client.login(username="owner@acme.io", password="pass-w0rd-acme")
    page = client.get("/usage/?period=2026-09").content.decode()
    assert "No device groups yet" in page and "data-group=" not in page

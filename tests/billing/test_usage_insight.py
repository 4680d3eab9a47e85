"""Usage a tenant can read before the bill: what a message costs (`/usage/explain`, on AWS IoT
Core's published examples and on the platform's own rules, answered by the broker's metering
code), usage per device (`/usage?by=device`, a tenant's own devices only) and the month's forecast
(`/usage/forecast`) on known usage rows for known days."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from common.charges.metering import properties_bytes
from data_plane.broker.message import Message
from tenants.billing import services as billing
from tenants.models import DeviceUsage, Tenant, Usage
from tenants.usage import selectors as usage_selectors
from tests.api.conftest import acme, attacker  # noqa: F401 (fixtures)


def explain(api, query: str) -> dict:
    response = api.get(f"/api/v1/usage/explain?{query}")
    assert response.status_code == 200, response.content
    return response.json()


@pytest.mark.parametrize(
    "query, units",
    [
        # AWS IoT Core: messages are metered in 5 KB increments: a 6 KB message is two, so is
        # an 8 KB one; up to 5 KB is one, and so is an empty one.
        ("size=6144", 2),
        ("size=8192", 2),
        ("size=5120", 1),
        ("size=5121", 2),
        ("size=0", 1),
        # The topic and MQTT 5 properties count with the payload.
        ("size=5100&topic=sensors/t1&properties_bytes=11", 2),
        ("size=5100&topic=ab", 1),
        # AWS meters a RETAIN publish for the publish and for the retained copy.
        ("size=6000&topic=t/r&retain=true", 4),
        ("size=0&topic=t/r&retain=true", 1),  # an empty retained payload clears: not stored
        # Fan-out: an 8 KB publish delivered to 3 subscribers: 2 in + 3 × 2 out.
        ("size=8192&subscribers=3", 8),
        ("size=8192&qos=1&subscribers=3", 8),  # QoS costs no more: acks are not billed
    ],
)
def test_explain_counts_units_as_aws_publishes_them(acme, query, units):  # noqa: F811
    _, api = acme
    body = explain(api, query)
    assert body["units"] == units
    assert body["unit_bytes"] == 5120
    assert sum(part["units"] for part in body["dimensions"]) == units
    assert {part["dimension"] for part in body["dimensions"]} == {"messages"}
    assert f"{units:,} unit" in body["why"]


def test_explain_is_what_the_broker_meters(acme):  # noqa: F811
    _, api = acme
    props = {"user_property": [("site", "north" * 40)], "content_type": "application/json"}
    message = Message("plant/7/temp", b"x" * 4990, 1, True, props)
    body = explain(
        api,
        f"size=4990&topic=plant/7/temp&qos=1&retain=true&properties_bytes={properties_bytes(props)}",
    )
    per_message = message.billable_units()
    assert per_message == 2  # 4,990 + 12 + the properties' bytes cross 5,120
    assert body["units_per_message"] == per_message
    assert body["units"] == 2 * per_message  # the publish and the retained copy
    assert "retained" in body["why"] and "PUBACK" in body["why"]


@pytest.mark.parametrize(
    "query, field",
    [
        ("", "size"),
        ("size=-1", "size"),
        ("size=big", "size"),
        ("size=10&qos=3", "qos"),
        ("size=10&retain=maybe", "retain"),
        ("size=10&properties_bytes=-5", "properties_bytes"),
        ("size=10&subscribers=x", "subscribers"),
    ],
)
def test_explain_names_a_bad_parameter(acme, query, field):  # noqa: F811
    _, api = acme
    response = api.get(f"/api/v1/usage/explain?{query}")
    assert response.status_code == 400
    assert field in response.json()["error"]["fields"]


def test_usage_by_device_shows_only_the_tenants_devices(acme, attacker):  # noqa: F811
    tenant, api = acme
    evil, evil_api = attacker
    for day, device, units, minutes in (
        (date(2026, 9, 1), "sensor-1", 12, 60),
        (date(2026, 9, 1), "sensor-2", 3, 5),
        (date(2026, 9, 2), "sensor-1", 7, 1440),
        (date(2026, 9, 4), "sensor-1", 100, 1),  # outside the range asked for
    ):
        DeviceUsage.objects.create(
            tenant=tenant, device=device, day=day, message_units=units, connection_minutes=minutes
        )
    DeviceUsage.objects.filter(tenant=tenant, device="sensor-2").update(
        rules_triggered=4, actions_executed=2, shadow_operations=3
    )
    DeviceUsage.objects.create(
        tenant=evil, device="sensor-1", day=date(2026, 9, 1), message_units=999, rules_triggered=9
    )
    body = api.get("/api/v1/usage?from=2026-09-01&to=2026-09-03&granularity=day&by=device").json()
    assert [
        (r["day"], r["device"], r["messages"], r["connection_minutes"]) for r in body["rows"]
    ] == [
        ("2026-09-01", "sensor-1", 12, 60),
        ("2026-09-01", "sensor-2", 3, 5),
        ("2026-09-02", "sensor-1", 7, 1440),
    ]
    assert body["devices"] == [
        {
            "device": "sensor-1",
            "messages": 19,
            "connection_minutes": 1500,
            "rules_triggered": 0,
            "actions_executed": 0,
            "shadow_operations": 0,
        },
        {
            "device": "sensor-2",
            "messages": 3,
            "connection_minutes": 5,
            "rules_triggered": 4,
            "actions_executed": 2,
            "shadow_operations": 3,
        },
    ]
    assert len(body["series"]) == 2  # the per-tenant series is still there
    theirs = evil_api.get("/api/v1/usage?from=2026-09-01&to=2026-09-03&by=device").json()
    assert [r["messages"] for r in theirs["rows"]] == [999]
    bad = api.get("/api/v1/usage?from=2026-09-01&by=tenant")
    assert bad.status_code == 400 and "by" in bad.json()["error"]["fields"]


def known_month(tenant: Tenant) -> None:
    """1–14 November: 100 × day units and 60 connection minutes a day; the 15th so far: 500 and
    30. Prices: base 10.00, messages 1.00 per 1,000 beyond 1,000, connection minutes 0.01 each."""
    Tenant.objects.filter(id=tenant.id).update(created_at=datetime(2026, 1, 5, tzinfo=UTC))
    tenant.refresh_from_db()  # a customer since January: the whole base fee
    billing.price_book_set(
        tenant.plan,
        effective_from=date(2026, 1, 1),
        base_fee_cents=1000,
        dimensions={
            "messages": {
                "included": 1000,
                "per": 1000,
                "tiers": [{"up_to": None, "price": "1.00"}],
            },
            "connection_minutes": {
                "included": 0,
                "per": 1,
                "tiers": [{"up_to": None, "price": "0.01"}],
            },
        },
    )
    november = datetime(2026, 11, 1, 6, tzinfo=UTC)
    for day in range(1, 15):
        Usage.objects.create(
            tenant=tenant,
            minute=november + timedelta(days=day - 1),
            message_units=100 * day,
            connection_minutes=60,
        )
    Usage.objects.create(
        tenant=tenant,
        minute=november + timedelta(days=14),
        message_units=500,
        connection_minutes=30,
    )


def test_forecast_arithmetic_on_known_days(acme):  # noqa: F811
    tenant, _ = acme
    known_month(tenant)
    body = usage_selectors.usage_forecast(tenant=tenant, now=datetime(2026, 11, 15, 12, tzinfo=UTC))
    by = {d["dimension"]: d for d in body["dimensions"]}
    # Month to date: 100 × (1 + … + 14) + 500 = 11,000 units; 14 × 60 + 30 = 870 minutes.
    assert by["messages"]["month_to_date"] == 11_000
    assert by["connection_minutes"]["month_to_date"] == 870
    # Rate: the last 7 complete days (8th–14th): 7,700 / 7 = 1,100 units and 60 minutes a day,
    # for the 15.5 days left: 11,000 + 17,050 and 870 + 930.
    assert body["days_left"] == 15.5
    assert by["messages"]["daily_rate"] == 1100
    assert by["messages"]["forecast"] == 28_050
    assert by["connection_minutes"]["forecast"] == 1_800
    # Money: (11,000 − 1,000 included) × 1.00 / 1,000 = 10.00; 870 × 0.01 = 8.70; base 10.00.
    assert (by["messages"]["included"], by["messages"]["billable"]) == (1000, 10_000)
    assert by["messages"]["month_to_date_cents"] == 1000
    assert by["connection_minutes"]["month_to_date_cents"] == 870
    assert body["month_to_date_cents"] == 1000 + 1000 + 870
    assert by["messages"]["forecast_cents"] == 2705  # 27,050 billable
    assert by["connection_minutes"]["forecast_cents"] == 1800
    assert body["forecast_cents"] == 1000 + 2705 + 1800
    assert by["rules_triggered"]["priced"] is False
    assert "7 complete UTC days" in body["method"]


def test_forecast_on_the_first_scales_today_and_never_falls_below(acme):  # noqa: F811
    tenant, api = acme
    known_month(tenant)
    Usage.objects.create(
        tenant=tenant, minute=datetime(2026, 12, 1, 1, tzinfo=UTC), message_units=600
    )
    body = usage_selectors.usage_forecast(tenant=tenant, now=datetime(2026, 12, 1, 6, tzinfo=UTC))
    messages = next(d for d in body["dimensions"] if d["dimension"] == "messages")
    # 600 in 6 hours: 2,400 a day, for December's 30.75 days left: 600 + 73,800.
    assert (messages["month_to_date"], messages["forecast"]) == (600, 74_400)
    quiet = usage_selectors.usage_forecast(
        tenant=tenant, now=datetime(2026, 11, 30, 23, tzinfo=UTC)
    )
    for dimension in quiet["dimensions"]:
        assert dimension["forecast"] >= dimension["month_to_date"]
    response = api.get("/api/v1/usage/forecast")
    assert response.status_code == 200
    assert {"month_to_date_cents", "forecast_cents", "method", "dimensions"} <= set(response.json())


def test_forecast_of_a_tenant_created_this_month_counts_from_its_creation(acme):  # noqa: F811
    """Issue 41: a tenant that signed up today forecast exactly its month to date (its rate
    averaged over days before it existed); one created mid-month had its rate cut the same way."""
    tenant, _ = acme
    known_month(tenant)
    created = datetime(2026, 11, 15, 8, tzinfo=UTC)
    Tenant.objects.filter(id=tenant.id).update(created_at=created)
    tenant.refresh_from_db()
    Usage.objects.filter(tenant=tenant).delete()
    Usage.objects.create(tenant=tenant, minute=created + timedelta(hours=1), message_units=400)
    body = usage_selectors.usage_forecast(tenant=tenant, now=datetime(2026, 11, 15, 12, tzinfo=UTC))
    messages = next(d for d in body["dimensions"] if d["dimension"] == "messages")
    # 400 in the 4 hours it has existed: 2,400 a day, for the 15.5 days left: 400 + 37,200.
    assert messages["daily_rate"] == 2400
    assert (messages["month_to_date"], messages["forecast"]) == (400, 37_600)

    # Created on the 12th at noon: 3 units a day from then on; the rate counts 2.5 days, not 7.
    created = datetime(2026, 11, 12, 12, tzinfo=UTC)
    Tenant.objects.filter(id=tenant.id).update(created_at=created)
    tenant.refresh_from_db()
    Usage.objects.filter(tenant=tenant).delete()
    Usage.objects.create(
        tenant=tenant, minute=datetime(2026, 11, 12, 18, tzinfo=UTC), message_units=500
    )
    Usage.objects.create(
        tenant=tenant, minute=datetime(2026, 11, 13, 9, tzinfo=UTC), message_units=1000
    )
    Usage.objects.create(
        tenant=tenant, minute=datetime(2026, 11, 14, 9, tzinfo=UTC), message_units=1000
    )
    body = usage_selectors.usage_forecast(tenant=tenant, now=datetime(2026, 11, 15, 0, tzinfo=UTC))
    messages = next(d for d in body["dimensions"] if d["dimension"] == "messages")
    # 2,500 over the 2.5 days it existed: 1,000 a day (averaged over 7 it was 357), 16 days left.
    assert messages["daily_rate"] == 1000
    assert (messages["month_to_date"], messages["forecast"]) == (2500, 18_500)
    assert "counted from its creation" in body["method"]

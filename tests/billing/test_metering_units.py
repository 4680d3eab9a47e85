"""Metering in AWS IoT Core's units: connection-minutes rounded up per connection (unit, with a
clock), and known traffic from real MQTT clients through a real broker landing in the usage log
(Parquet in the object store) and in Postgres with the units the rules give."""

from __future__ import annotations

import io
from datetime import date

import pyarrow.parquet as pq
import pytest
from django.core.management import call_command

from common.archive.schema import USAGE_SCHEMA, message_units
from common.stores.object_store import open_object_store
from data_plane.broker.message import Message, metered_size
from data_plane.tenancy.metering import UsageMeter
from tenants.billing import services as billing
from tenants.devices import services as device_services
from tenants.models import DeviceUsage, Invoice, Usage
from tenants.tenant import services as tenant_services
from tests.billing.traffic import expected_units, run_known_traffic
from tests.tenancy.test_broker_tenancy import start_pg_broker


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def connection_minutes(rows: list) -> dict[int, int]:
    out: dict[int, int] = {}
    for _, minute, usage in rows:
        if usage.connection_minutes:
            out[minute] = out.get(minute, 0) + usage.connection_minutes
    return out


@pytest.mark.parametrize(
    "start, held, minutes",
    [(600.0, 1, 1), (600.0, 60, 1), (630.0, 61, 2), (659.0, 2, 1), (600.0, 185, 4)],
)
def test_connection_minutes_round_up_per_connection(start, held, minutes):
    clock = Clock(start)
    meter = UsageMeter(clock)
    meter.connection_opened("c1", "acme")
    clock.now += held / 2
    rows = meter.take()  # a flush while open charges the minutes begun so far, no more
    clock.now = start + held
    meter.connection_closed("c1")
    rows += meter.take(final=True)
    assert sum(connection_minutes(rows).values()) == minutes


def test_open_connections_are_charged_every_minute_they_stay_open():
    clock = Clock(600.0)
    meter = UsageMeter(clock)
    for key in ("a", "b"):
        meter.connection_opened(key, "acme")
    rows = []
    for _ in range(3):
        clock.now += 60
        rows += meter.take()
    clock.now += 10
    charged = connection_minutes(rows + meter.take(final=True))  # still open
    assert sum(charged.values()) == 2 * 4 and set(charged) == {600, 660, 720, 780}


def test_message_units_are_5_kib_increments_of_payload_topic_and_properties():
    assert [message_units(n) for n in (0, 1, 5120, 5121, 12_000)] == [1, 1, 1, 2, 3]
    message = Message("t/x", b"x" * 5_100, 1, False, {"user_property": [("k", "v" * 20)]})
    assert metered_size(message) == 5_100 + 3 + (1 + 2 + 1 + 2 + 20)  # id, key, value
    assert message.billable_units() == 2


@pytest.mark.django_db(transaction=True)
def test_known_traffic_is_metered_logged_and_invoiced(tmp_path, monkeypatch, spark):
    monkeypatch.setenv("OBJECT_STORE_URL", tmp_path.as_uri())
    acme = tenant_services.tenant_create("acme")
    other = tenant_services.tenant_create("other")
    _, secret = device_services.device_create(tenant=acme, name="d", client_id_policy="any")
    _, other_secret = device_services.device_create(tenant=other, name="d", client_id_policy="any")
    process, port = start_pg_broker(
        "--no-archive", "--usage-flush-interval", "0.5", "--usage-segment-age", "0"
    )
    try:
        run_known_traffic(port, secret)
        from tests.broker.clients import Paho

        noise = Paho(port, "other/d", other_secret, "noise")
        noise.publish("n", b"y" * 20_000, 1)  # another tenant's 4 units are not acme's
        noise.close()
    finally:
        process.terminate()  # the final flush writes the current minute
        assert process.wait(timeout=20) == 0
    store = open_object_store(tmp_path.as_uri())
    keys = store.list("usage/")
    assert keys and all(k.startswith("usage/date=") and k.endswith(".parquet") for k in keys)
    table = pq.read_table(io.BytesIO(store.get(keys[0])))
    assert table.schema.equals(USAGE_SCHEMA, check_metadata=False)
    rows = [r for k in keys for r in pq.read_table(io.BytesIO(store.get(k))).to_pylist()]
    acme_rows = [r for r in rows if r["tenant"] == "acme"]
    expected = expected_units()
    for column, value in expected.items():
        assert sum(r[column] for r in acme_rows) == value, column
    assert sum(r["messages"] for r in rows if r["tenant"] == "other") == 1 + 4 + 0
    assert all(r["minute"].second == 0 for r in rows)
    db = Usage.objects.filter(tenant=acme)
    assert sum(u.message_units for u in db) == expected["messages"]
    assert sum(u.connection_minutes for u in db) == expected["connection_minutes"]
    # Per device, the same units: every one of acme's was device `d`'s; `other/d` is other's.
    per_device = DeviceUsage.objects.filter(tenant=acme)
    assert {u.device for u in per_device} == {"d"}
    assert sum(u.message_units for u in per_device) == expected["messages"]
    assert sum(u.connection_minutes for u in per_device) == expected["connection_minutes"]
    other_device = DeviceUsage.objects.exclude(tenant=acme)
    assert [(u.device, u.message_units) for u in other_device] == [("d", 1 + 4)]

    # The billing job over that log: 1 ¢ per message unit, 5 ¢ per connection-minute.
    billing.price_book_set(
        acme.plan,
        effective_from=date(2026, 1, 1),
        base_fee_cents=0,
        dimensions={
            "messages": {"included": 0, "per": 1, "tiers": [{"up_to": None, "price": "0.01"}]},
            "connection_minutes": {
                "included": 0,
                "per": 1,
                "tiers": [{"up_to": None, "price": "0.05"}],
            },
        },
    )
    period = rows[0]["minute"].strftime("%Y-%m")
    out = io.StringIO()
    call_command("billing_report", "--period", period, "--tenant", "acme", stdout=out, stderr=out)
    invoice = Invoice.objects.get(tenant=acme, period=period)
    lines = {line["code"]: line for line in invoice.line_items}
    assert lines["messages"]["quantity"] == expected["messages"]
    assert lines["connection_minutes"]["quantity"] == expected["connection_minutes"]
    assert invoice.total_cents == expected["messages"] * 1 + expected["connection_minutes"] * 5


def test_metered_size_counts_properties_as_encoded_on_the_wire():
    """Payload + topic (UTF-8 bytes) + each property as MQTT 5 encodes it (computed by hand from
    the specification's layouts, not by the codec)."""
    message = Message(
        "capteurs/température",  # é: 2 bytes in UTF-8
        b"p" * 100,
        1,
        False,
        {
            "payload_format_indicator": 1,  # id + byte
            "message_expiry_interval": 60,  # id + 4 bytes
            "content_type": "application/json",  # id + 2 + 16
            "response_topic": "r/1",  # id + 2 + 3
            "correlation_data": b"\x00\x01\x02",  # id + 2 + 3
            "user_property": [("a", "bb"), ("a", "ccc")],  # (id + 2 + 1 + 2 + 2), (… + 3)
        },
    )
    topic = len("capteurs/temperature") + 1
    properties = 2 + 5 + 19 + 6 + 6 + 8 + 9
    assert metered_size(message) == 100 + topic + properties
    assert metered_size(Message("t", b"", 0, False)) == 1  # no properties: nothing more
